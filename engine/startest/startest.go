// Package startest runs the test_* functions of one *_test.star file in
// the sandbox transforms run in, with the stdlib (assert among it)
// predeclared: what `engine test` does for each file, in an evaluation
// worker (engine/worker) so that a test is bounded like a transform.
//
// Like the engine, it must not import client-go, controller-runtime or
// net/http.
package startest

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"go.starlark.net/starlark"

	"github.com/manifestsync/manifestsync/engine"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// File is a test file and the tree its load() calls read from.
type File struct {
	// Root is the local directory of the tree, as the user gave it;
	// positions name files under it.
	Root string `json:"root"`
	// Rel is the slash-separated path of the test file inside Root.
	Rel string `json:"rel"`
	// Source names the tree in messages ("path escapes source "repo"").
	Source string `json:"source"`
	// Snapshot is the tree's content.
	Snapshot *engine.Snapshot `json:"-"`
}

// Display is the file's local path, as PASS and FAIL lines name it.
func (f File) Display() string {
	return filepath.Join(f.Root, filepath.FromSlash(f.Rel))
}

// Run loads the file and calls each of its test_* functions whose name
// filter matches (all when filter is nil), in the order they are defined,
// writing a PASS or FAIL line for each (a failure followed by its error,
// indented) and what the tests print. A file that does not load is one
// failure.
//
// With update set, assert.golden records what it is given instead of
// comparing it with its golden file: Run returns those files, for the
// caller to write (`engine test --update`).
func Run(ctx context.Context, w io.Writer, limits lstar.Limits, f File, filter *regexp.Regexp, update bool) (passed, failed int, goldens []stdlib.Golden) {
	files := engine.SnapshotFiles{f.Source: f.Snapshot}
	ctx = lstar.WithFiles(ctx, files, f.Source)
	if update {
		g := &stdlib.Goldens{}
		ctx = stdlib.WithGoldenUpdates(ctx, g)
		defer func() { goldens = g.Files() }()
	}
	in := lstar.New(lstar.Options{
		Predeclared: stdlib.Predeclared(),
		Limits:      limits,
		Print:       func(_ *starlark.Thread, msg string) { fmt.Fprintln(w, msg) },
		// Positions name files by their local path, so that a failure
		// names a file the user can open.
		FileName: func(_, p string) string { return filepath.Join(f.Root, filepath.FromSlash(p)) },
	})
	display := f.Display()
	mod, err := in.Load(ctx, files, lstar.Script{Source: f.Source, Path: f.Rel})
	if err != nil {
		fmt.Fprintf(w, "FAIL %s\n%s\n", display, indentError(err.Error()))
		return 0, 1, nil
	}
	type test struct {
		name string
		pos  string
		line int32
	}
	var tests []test
	for name, v := range mod.Globals {
		fn, ok := v.(*starlark.Function)
		if !ok || !strings.HasPrefix(name, "test_") || (filter != nil && !filter.MatchString(name)) {
			continue
		}
		pos := fn.Position()
		tests = append(tests, test{name: name, pos: fmt.Sprintf("%s:%d", display, pos.Line), line: pos.Line})
	}
	sort.Slice(tests, func(i, j int) bool { return tests[i].line < tests[j].line })
	for _, t := range tests {
		if _, err := in.Call(ctx, mod, t.name); err != nil {
			fmt.Fprintf(w, "FAIL %s (%s)\n%s\n", t.name, t.pos, indentError(err.Error()))
			failed++
			continue
		}
		fmt.Fprintf(w, "PASS %s (%s)\n", t.name, t.pos)
		passed++
	}
	return passed, failed, nil
}

// indentError indents every line of an error message under its FAIL line.
func indentError(msg string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(msg, "\n"), "\n", "\n    ")
}
