package stdlib

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// Assert is the Starlark module assert, for test_* functions in *_test.star
// files (`engine test`). Each check returns None when it holds and otherwise
// fails the test with an error that says what differs and carries the line of
// the failed check.
//
//	assert.eq(got, want, msg=None)
//	assert.ne(got, unwanted, msg=None)
//	assert.true(cond, msg=None)
//	assert.lt(a, b, msg=None)
//	assert.contains(container, x, msg=None)
//	assert.fails(fn, pattern) -> str   # the error message of fn()
//	assert.golden(got, path, msg=None)   # a snapshot test (golden.go)
var Assert = &starlarkstruct.Module{
	Name: "assert",
	Members: starlark.StringDict{
		"eq":       newBuiltin("assert.eq", assertEq),
		"ne":       newBuiltin("assert.ne", assertNe),
		"true":     newBuiltin("assert.true", assertTrue),
		"lt":       newBuiltin("assert.lt", assertLt),
		"contains": newBuiltin("assert.contains", assertContains),
		"fails":    newBuiltin("assert.fails", assertFails),
		"golden":   newBuiltin("assert.golden", assertGolden),
	},
}

var assertModule = Module{
	Name:  "assert",
	Doc:   "Checks for test_* functions in *_test.star files, run by `engine test`. A failed check stops the test with an error naming the check, what it got and what it wanted, and the line of the check; msg, when given, is added to the error.",
	Value: Assert,
	Funcs: []Func{
		{"eq", "assert.eq(got, want, msg=None)", "Fails unless got == want. For dicts and lists the error also points at the first differing element, e.g. [\"metadata\"][\"name\"]."},
		{"ne", "assert.ne(got, unwanted, msg=None)", "Fails if got == unwanted."},
		{"true", "assert.true(cond, msg=None)", "Fails unless cond is truthy (use assert.true(not x) for the opposite)."},
		{"lt", "assert.lt(a, b, msg=None)", "Fails unless a < b; comparing values of different types is an error."},
		{"contains", "assert.contains(container, x, msg=None)", "Fails unless x in container: an element of a list or tuple, a key of a dict, a substring of a string."},
		{"fails", "assert.fails(fn, pattern) -> str", "Calls fn() and fails unless it fails with an error whose message matches the regular expression pattern (re.search semantics). Returns the error message, for further checks."},
		{"golden", "assert.golden(got, path, msg=None)", "A snapshot test: fails unless got (a str as it is, any other value as yaml.encode renders it) equals the content of the golden file at path (resolved as load() resolves modules: \"testdata/dev.yaml\" is next to the test file, \"//testdata/dev.yaml\" at the root of its tree), showing a diff of the two. Under `engine test --update` it passes and (re)writes the file with got instead."},
	},
}

// failure builds a check's error: the caller's description, then msg if any.
func failure(msg starlark.Value, format string, args ...any) error {
	text := fmt.Sprintf(format, args...)
	if s, ok := msg.(starlark.String); ok {
		text = string(s) + ": " + text
	} else if msg != nil && msg != starlark.None {
		text = msg.String() + ": " + text
	}
	return errors.New(text)
}

func assertEq(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var got, want, msg starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "got", &got, "want", &want, "msg?", &msg); err != nil {
		return nil, err
	}
	eq, err := starlark.Equal(got, want)
	if err != nil {
		return nil, err
	}
	if eq {
		return starlark.None, nil
	}
	text := fmt.Sprintf("got %s, want %s", repr(got), repr(want))
	if path, g, w := firstDifference(got, want, "", 0); path != "" {
		text += fmt.Sprintf(" (at %s: got %s, want %s)", path, g, w)
	}
	return nil, failure(msg, "%s", text)
}

func assertNe(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var got, unwanted, msg starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "got", &got, "unwanted", &unwanted, "msg?", &msg); err != nil {
		return nil, err
	}
	eq, err := starlark.Equal(got, unwanted)
	if err != nil {
		return nil, err
	}
	if eq {
		return nil, failure(msg, "got %s, want anything else", repr(got))
	}
	return starlark.None, nil
}

func assertTrue(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var cond, msg starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "cond", &cond, "msg?", &msg); err != nil {
		return nil, err
	}
	if !cond.Truth() {
		return nil, failure(msg, "got %s, want a true value", repr(cond))
	}
	return starlark.None, nil
}

func assertLt(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x, y, msg starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "a", &x, "b", &y, "msg?", &msg); err != nil {
		return nil, err
	}
	lt, err := starlark.Compare(syntax.LT, x, y)
	if err != nil {
		return nil, err
	}
	if !lt {
		return nil, failure(msg, "got %s, want less than %s", repr(x), repr(y))
	}
	return starlark.None, nil
}

func assertContains(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var container, x, msg starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "container", &container, "x", &x, "msg?", &msg); err != nil {
		return nil, err
	}
	in, err := starlark.Binary(syntax.IN, x, container)
	if err != nil {
		return nil, err
	}
	if !in.Truth() {
		return nil, failure(msg, "%s does not contain %s", repr(container), repr(x))
	}
	return starlark.None, nil
}

func assertFails(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		fn      starlark.Callable
		pattern string
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "fn", &fn, "pattern", &pattern); err != nil {
		return nil, err
	}
	re, err := compileRegexp(pattern, anywhere)
	if err != nil {
		return nil, err
	}
	_, callErr := starlark.Call(thread, fn, nil, nil)
	if callErr == nil {
		return nil, fmt.Errorf("%s succeeded, want an error matching %q", fn.Name(), pattern)
	}
	text := callErr.Error()
	var evalErr *starlark.EvalError
	if errors.As(callErr, &evalErr) {
		text = evalErr.Msg
	}
	if !re.MatchString(text) {
		return nil, fmt.Errorf("%s failed with %q, want an error matching %q", fn.Name(), text, pattern)
	}
	return starlark.String(text), nil
}

// maxRepr bounds how much of a value an assertion error shows.
const maxRepr = 400

// repr is v's Starlark representation, shortened if long.
func repr(v starlark.Value) string {
	s := v.String()
	if len(s) > maxRepr {
		s = s[:maxRepr] + "..."
	}
	return s
}

// firstDifference locates the first difference between two unequal values:
// a path such as ["spec"]["containers"][0] and the two values found there,
// or "" when the difference is at the top (or could not be located).
func firstDifference(got, want starlark.Value, path string, depth int) (string, string, string) {
	if depth > 64 {
		return "", "", ""
	}
	switch g := got.(type) {
	case starlark.String, starlark.Bytes:
		// Indexable, but the message already shows both in full.
	case *starlark.Dict:
		w, ok := want.(*starlark.Dict)
		if !ok {
			break
		}
		for _, item := range g.Items() {
			k := item[0]
			wv, found, err := w.Get(k)
			if err != nil {
				return "", "", ""
			}
			p := path + "[" + k.String() + "]"
			if !found {
				return p, repr(item[1]), "nothing"
			}
			if eq, err := starlark.Equal(item[1], wv); err == nil && !eq {
				if sub, gs, ws := firstDifference(item[1], wv, p, depth+1); sub != "" {
					return sub, gs, ws
				}
				return p, repr(item[1]), repr(wv)
			}
		}
		for _, k := range w.Keys() {
			if _, found, _ := g.Get(k); !found {
				wv, _, _ := w.Get(k)
				return path + "[" + k.String() + "]", "nothing", repr(wv)
			}
		}
	case starlark.Indexable:
		w, ok := want.(starlark.Indexable)
		if !ok || got.Type() != want.Type() {
			break
		}
		n := min(g.Len(), w.Len())
		for i := range n {
			p := fmt.Sprintf("%s[%d]", path, i)
			if eq, err := starlark.Equal(g.Index(i), w.Index(i)); err == nil && !eq {
				if sub, gs, ws := firstDifference(g.Index(i), w.Index(i), p, depth+1); sub != "" {
					return sub, gs, ws
				}
				return p, repr(g.Index(i)), repr(w.Index(i))
			}
		}
		if g.Len() != w.Len() {
			return path + ".len", fmt.Sprint(g.Len()), fmt.Sprint(w.Len())
		}
	}
	// Only a nested difference is worth a path: at the top the message
	// already shows both values.
	return "", "", ""
}
