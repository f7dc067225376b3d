package stdlib

import (
	"fmt"
	"regexp"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// Re is the Starlark module re: regular expressions with Go's RE2 syntax
// (https://golang.org/s/re2syntax), which runs in time linear in the input,
// so no pattern can backtrack catastrophically. The functions follow Python's
// re where RE2 allows:
//
//	re.match(pattern, s) -> bool           # a match at the start of s
//	re.fullmatch(pattern, s) -> bool       # a match of all of s
//	re.search(pattern, s) -> list | None   # first match anywhere: [whole, group1, ...]
//	re.findall(pattern, s) -> list         # every match, shaped like Python's findall
//	re.sub(pattern, repl, s, count=0) -> str  # repl expands $1, ${name}; $$ is a "$"
//	re.split(pattern, s, maxsplit=0) -> list
//	re.escape(s) -> str
//
// Compiled patterns are cached (up to maxCachedRegexps of them per process).
var Re = &starlarkstruct.Module{
	Name: "re",
	Members: starlark.StringDict{
		"match":     newBuiltin("re.match", reMatch),
		"fullmatch": newBuiltin("re.fullmatch", reMatch),
		"search":    newBuiltin("re.search", reSearch),
		"findall":   newBuiltin("re.findall", reFindall),
		"sub":       newBuiltin("re.sub", reSub),
		"split":     newBuiltin("re.split", reSplit),
		"escape":    newBuiltin("re.escape", reEscape),
	},
}

var reModule = Module{
	Name:  "re",
	Doc:   "Regular expressions in Go's RE2 syntax (no backreferences or lookaround; matching is linear-time, so no pattern can hang an evaluation). Function names and results follow Python's re; replacements use Go's $1 syntax.",
	Value: Re,
	Funcs: []Func{
		{"match", "re.match(pattern, s) -> bool", `Reports whether pattern matches at the start of s, like Python's re.match: re.match("b", "abc") is False.`},
		{"fullmatch", "re.fullmatch(pattern, s) -> bool", "Reports whether pattern matches the whole of s."},
		{"search", "re.search(pattern, s) -> list | None", "Finds the first match of pattern anywhere in s and returns [whole match, group 1, group 2, ...], with None for groups that did not take part; returns None when nothing matches."},
		{"findall", "re.findall(pattern, s) -> list", "Returns every non-overlapping match in s, like Python's findall: the matched strings when pattern has no groups, group 1 when it has one, and a tuple of all groups when it has several (\"\" for a group that did not take part)."},
		{"sub", "re.sub(pattern, repl, s, count=0) -> str", "Replaces the first count matches of pattern in s (all when count is 0) by repl, in which $1 or ${1} stands for group 1, ${name} for a named group and $$ for a literal $ (Go's syntax, not Python's \\1)."},
		{"split", "re.split(pattern, s, maxsplit=0) -> list", "Splits s around the matches of pattern into at most maxsplit+1 pieces (no limit when maxsplit is 0). As in Go, captured groups are not included in the result."},
		{"escape", "re.escape(s) -> str", "Returns s with every regular-expression metacharacter escaped, so that the result matches s literally."},
	},
}

// maxCachedRegexps bounds the compiled-pattern cache; when it is full the
// cache is emptied and fills again with the patterns in use.
const maxCachedRegexps = 256

// anchoring says which part of the input a pattern must match.
type anchoring int

const (
	anywhere anchoring = iota // search, findall, sub, split
	atStart                   // match
	wholly                    // fullmatch
)

var regexpCache = struct {
	sync.Mutex
	m map[regexpKey]*regexp.Regexp
}{m: make(map[regexpKey]*regexp.Regexp)}

type regexpKey struct {
	pattern string
	anchor  anchoring
}

// compileRegexp compiles pattern, anchored as asked, through the cache.
func compileRegexp(pattern string, anchor anchoring) (*regexp.Regexp, error) {
	key := regexpKey{pattern, anchor}
	regexpCache.Lock()
	re, ok := regexpCache.m[key]
	regexpCache.Unlock()
	if ok {
		return re, nil
	}

	// Compile the pattern as given first: the error then quotes the user's
	// pattern, and a pattern that compiles has balanced parentheses, so
	// wrapping it in a group below cannot change its meaning.
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("invalid pattern: %w", err)
	}
	switch anchor {
	case atStart:
		re, err = regexp.Compile(`\A(?:` + pattern + `)`)
	case wholly:
		re, err = regexp.Compile(`\A(?:` + pattern + `)\z`)
	}
	if err != nil {
		return nil, fmt.Errorf("invalid pattern: %w", err)
	}

	regexpCache.Lock()
	if len(regexpCache.m) >= maxCachedRegexps {
		clear(regexpCache.m)
	}
	regexpCache.m[key] = re
	regexpCache.Unlock()
	return re, nil
}

func reMatch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var pattern, s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "s", &s); err != nil {
		return nil, err
	}
	anchor := atStart
	if b.Name() == "re.fullmatch" {
		anchor = wholly
	}
	re, err := compileRegexp(pattern, anchor)
	if err != nil {
		return nil, err
	}
	return starlark.Bool(re.MatchString(s)), nil
}

func reSearch(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var pattern, s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "s", &s); err != nil {
		return nil, err
	}
	re, err := compileRegexp(pattern, anywhere)
	if err != nil {
		return nil, err
	}
	loc := re.FindStringSubmatchIndex(s)
	if loc == nil {
		return starlark.None, nil
	}
	groups := make([]starlark.Value, len(loc)/2)
	for i := range groups {
		groups[i] = submatch(s, loc, i, starlark.None)
	}
	return starlark.NewList(groups), nil
}

func reFindall(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var pattern, s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "s", &s); err != nil {
		return nil, err
	}
	re, err := compileRegexp(pattern, anywhere)
	if err != nil {
		return nil, err
	}
	var out []starlark.Value
	for _, loc := range re.FindAllStringSubmatchIndex(s, -1) {
		switch n := re.NumSubexp(); n {
		case 0:
			out = append(out, submatch(s, loc, 0, starlark.String("")))
		case 1:
			out = append(out, submatch(s, loc, 1, starlark.String("")))
		default:
			groups := make(starlark.Tuple, n)
			for i := range groups {
				groups[i] = submatch(s, loc, i+1, starlark.String(""))
			}
			out = append(out, groups)
		}
	}
	return starlark.NewList(out), nil
}

// submatch returns group i of a match at loc in s, or absent when the group
// did not take part in the match.
func submatch(s string, loc []int, i int, absent starlark.Value) starlark.Value {
	if loc[2*i] < 0 {
		return absent
	}
	return starlark.String(s[loc[2*i]:loc[2*i+1]])
}

func reSub(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		pattern, repl, s string
		count            int
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "repl", &repl, "s", &s, "count?", &count); err != nil {
		return nil, err
	}
	if count < 0 {
		return nil, fmt.Errorf("count must not be negative, got %d", count)
	}
	re, err := compileRegexp(pattern, anywhere)
	if err != nil {
		return nil, err
	}
	if count == 0 {
		return starlark.String(re.ReplaceAllString(s, repl)), nil
	}
	var out []byte
	last := 0
	for _, loc := range re.FindAllStringSubmatchIndex(s, count) {
		out = append(out, s[last:loc[0]]...)
		out = re.ExpandString(out, repl, s, loc)
		last = loc[1]
	}
	out = append(out, s[last:]...)
	return starlark.String(out), nil
}

func reSplit(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		pattern, s string
		maxsplit   int
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "pattern", &pattern, "s", &s, "maxsplit?", &maxsplit); err != nil {
		return nil, err
	}
	if maxsplit < 0 {
		return nil, fmt.Errorf("maxsplit must not be negative, got %d", maxsplit)
	}
	re, err := compileRegexp(pattern, anywhere)
	if err != nil {
		return nil, err
	}
	n := -1
	if maxsplit > 0 {
		n = maxsplit + 1
	}
	parts := re.Split(s, n)
	out := make([]starlark.Value, len(parts))
	for i, p := range parts {
		out[i] = starlark.String(p)
	}
	return starlark.NewList(out), nil
}

func reEscape(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &s); err != nil {
		return nil, err
	}
	return starlark.String(regexp.QuoteMeta(s)), nil
}
