package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
)

// Errors with context: under an error that names FILE:LINE[:COL] of a file
// the evaluation read, the CLI shows that line with a caret under the
// column, in colour on a terminal. Positions are found in the message
// itself, as every layer writes them (Starlark, CUE, YAML, the sync file's
// fields), because errors reach the CLI as text from the evaluation
// worker; only names of files of the tree count, so nothing outside it is
// read. Lines are masked by the evaluation's redactor, and lines of Secret
// manifests lose their values whatever the redactor knows (a Secret that
// does not parse taught it nothing).

// tree is the text of the files an evaluation read, by the names messages
// give them: the sync file as given, and each snapshot file by its
// Snapshot.FileName.
type tree struct {
	files map[string][]byte
	red   *redact.Redactor
}

// newTree indexes the sync file (data, named as given) and the snapshots'
// files; red masks what it shows (nil: the snapshots' Secrets).
func newTree(syncName string, syncData []byte, snaps map[string]*engine.Snapshot, red *redact.Redactor) *tree {
	t := &tree{files: map[string][]byte{}, red: red}
	if t.red == nil {
		t.red = engine.SnapshotRedactor(snaps)
	}
	for name, s := range snaps {
		if s == nil {
			continue
		}
		for p, b := range s.Files {
			t.files[s.FileName(name, p)] = b
		}
	}
	if syncName != "" && syncData != nil {
		t.files[syncName] = syncData
	}
	return t
}

// filePos is a place in a file of a tree; Col 0 when unknown.
type filePos struct {
	File      string
	Line, Col int
}

// positionRE matches "FILE:LINE" and "FILE:LINE:COL"; yamlLineRE matches
// "FILE: yaml: line LINE", as YAML decoding errors name lines.
var (
	positionRE = regexp.MustCompile(`([A-Za-z0-9_./@+~-]+):([0-9]+)(?::([0-9]+))?`)
	yamlLineRE = regexp.MustCompile(`([A-Za-z0-9_./@+~-]+): yaml: line ([0-9]+): (did not find expected)?`)
)

// positions are the places in files of t that msg names, in order, each
// once.
func (t *tree) positions(msg string) []filePos {
	type found struct {
		at  int
		pos filePos
	}
	var all []found
	for _, m := range positionRE.FindAllStringSubmatchIndex(msg, -1) {
		p := filePos{File: msg[m[2]:m[3]]}
		p.Line, _ = strconv.Atoi(msg[m[4]:m[5]])
		if m[6] >= 0 {
			p.Col, _ = strconv.Atoi(msg[m[6]:m[7]])
		}
		all = append(all, found{m[0], p})
	}
	for _, m := range yamlLineRE.FindAllStringSubmatchIndex(msg, -1) {
		p := filePos{File: msg[m[2]:m[3]]}
		p.Line, _ = strconv.Atoi(msg[m[4]:m[5]])
		if m[6] >= 0 {
			// yaml.v3 names the line of a parser error counting from 0
			// (its scanner errors count from 1).
			p.Line++
		}
		all = append(all, found{m[0], p})
	}
	slices.SortStableFunc(all, func(a, b found) int { return a.at - b.at }) // in message order
	var out []filePos
	seen := map[filePos]bool{}
	for _, f := range all {
		if _, ok := t.files[f.pos.File]; !ok || f.pos.Line < 1 || seen[f.pos] {
			continue
		}
		seen[f.pos] = true
		out = append(out, f.pos)
	}
	return out
}

// line is line n of file and the part of it before column col (before
// the first non-blank character when col is 0), both masked, or false when
// there is no such line.
func (t *tree) line(file string, n, col int) (text, before string, ok bool) {
	data, ok := t.files[file]
	if !ok || n < 1 {
		return "", "", false
	}
	lines := strings.Split(string(data), "\n")
	if n > len(lines) {
		return "", "", false
	}
	raw := strings.TrimRight(lines[n-1], "\r")
	if col < 1 || col > len(raw)+1 {
		col = len(raw) - len(strings.TrimLeft(raw, " \t")) + 1
	}
	mask := func(s string) string {
		if inSecret(lines, n-1) {
			s = maskValue(s)
		}
		return t.red.String(s)
	}
	// The part before the column is masked on its own, so that the caret
	// stays under the same character when a value before it is masked.
	return mask(raw), mask(raw[:col-1]), true
}

// secretKindRE is a document's kind line that says Secret.
var secretKindRE = regexp.MustCompile(`^kind:\s*["']?Secret["']?\s*(#.*)?$`)

// inSecret says whether line i of a YAML file belongs to a document of
// kind Secret.
func inSecret(lines []string, i int) bool {
	start, end := i, i
	for start > 0 && !strings.HasPrefix(lines[start], "---") {
		start--
	}
	for end < len(lines)-1 && !strings.HasPrefix(lines[end+1], "---") {
		end++
	}
	for _, l := range lines[start : end+1] {
		if secretKindRE.MatchString(strings.TrimRight(l, "\r")) {
			return true
		}
	}
	return false
}

// plainKeys are the keys of a Secret manifest whose values are no secret.
var plainKeys = map[string]bool{"apiVersion": true, "kind": true, "type": true, "name": true, "namespace": true, "metadata": true, "data": true, "stringData": true}

// maskValue replaces the value of a "key: value" line (or a list item, or
// a continuation line) of a Secret manifest with ***.
func maskValue(line string) string {
	body := strings.TrimLeft(line, " \t-")
	indent := line[:len(line)-len(body)]
	key, value, ok := strings.Cut(body, ":")
	switch {
	case ok && plainKeys[strings.Trim(key, `"' `)]:
		return line
	case ok && strings.TrimSpace(value) == "":
		return line
	case ok && !strings.ContainsAny(key, " \"'{"):
		return indent + key + ": ***"
	case strings.TrimSpace(body) == "":
		return line
	}
	return indent + "***"
}

// snippetColors are the escape sequences of a snippet on a terminal.
type snippetColors struct{ gutter, caret, reset string }

var ansi = snippetColors{gutter: "\x1b[2m", caret: "\x1b[1;31m", reset: "\x1b[0m"}

// renderSnippet writes the line of pos and a caret after before, the part
// of the line before the column:
//
//	  --> app/main.star:2:19
//	  |
//	2 |     n = ctx.params["replica"]
//	  |                   ^
func renderSnippet(w io.Writer, pos filePos, text, before string, color bool) {
	var c snippetColors
	if color {
		c = ansi
	}
	num := strconv.Itoa(pos.Line)
	pad := strings.Repeat(" ", len(num))
	// The caret lines up with the text as printed: tabs stay tabs, other
	// characters before it become spaces.
	under := strings.Map(func(r rune) rune {
		if r == '\t' {
			return r
		}
		return ' '
	}, before)
	where := pos.File + ":" + num
	if pos.Col > 0 {
		where += ":" + strconv.Itoa(pos.Col)
	}
	fmt.Fprintf(w, "%s  --> %s%s\n", c.gutter, where, c.reset)
	fmt.Fprintf(w, "%s%s |%s\n", c.gutter, pad, c.reset)
	fmt.Fprintf(w, "%s%s |%s %s\n", c.gutter, num, c.reset, text)
	fmt.Fprintf(w, "%s%s |%s %s%s^%s\n", c.gutter, pad, c.reset, under, c.caret, c.reset)
}

// snippet writes the snippet of pos when it is a line of a file of t, and
// says whether it did.
func (t *tree) snippet(w io.Writer, pos filePos, color bool) bool {
	text, before, ok := t.line(pos.File, pos.Line, pos.Col)
	if ok {
		renderSnippet(w, pos, text, before, color)
	}
	return ok
}

// writeError writes prefix and the error's message and, under each line of
// the message that names a place in a file of t (when t is not nil), that
// place's snippet, each place once.
func writeError(w io.Writer, prefix string, err error, t *tree, color bool) {
	var b strings.Builder
	seen := map[filePos]bool{}
	for i, line := range strings.Split(err.Error(), "\n") {
		if i == 0 {
			b.WriteString(prefix)
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if t == nil {
			continue
		}
		for _, p := range t.positions(line) {
			if !seen[p] && t.snippet(&b, p, color) {
				seen[p] = true
			}
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// colorOn says whether to colour what goes to w: a terminal, and NO_COLOR
// (no-color.org) not set.
func colorOn(w io.Writer) bool {
	return useColor(isTerminal(w), os.Getenv("NO_COLOR"))
}

// useColor is colorOn's rule: a terminal, and NO_COLOR empty.
func useColor(terminal bool, noColor string) bool {
	return terminal && noColor == ""
}
