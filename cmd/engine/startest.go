package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.starlark.net/starlark"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// starTestFlags are the flags of engine test.
type starTestFlags struct {
	run    string
	limits lstar.Limits
}

func newTestCmd() *cobra.Command {
	var f starTestFlags
	cmd := &cobra.Command{
		Use:   "test [PATHS...]",
		Short: "Run the test_* functions of *_test.star files",
		Long: `Run the test_* functions of every *_test.star file under PATHS (default
"."), each in the sandbox transforms run in, with the stdlib modules,
assert among them, predeclared.

load() in a test file resolves as it does in a transform: relative to the
file, or from the root ("//lib/x.star"). The root is the directory given
on the command line that the test file was found under (the file's own
directory for a file given by name); nothing outside it can be loaded.

Each test prints PASS or FAIL with its file:line, a failure is followed
by its error; the last line counts them: "N passed, N failed".

Exit status: 0 all passed, 1 a test failed, 2 usage error or no tests.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStarTests(cmd.Context(), cmd.OutOrStdout(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "REGEXP: run only the tests whose name matches")
	d := lstar.DefaultLimits()
	fl.Uint64Var(&f.limits.MaxSteps, "max-steps", d.MaxSteps, "Starlark execution steps per file load and per test")
	fl.DurationVar(&f.limits.Timeout, "timeout", d.Timeout, "wall-clock limit per file load and per test")
	return cmd
}

// starTestFile is a *_test.star file and the tree load() reads from.
type starTestFile struct {
	root string // directory; the file's source root
	rel  string // slash-separated path of the file inside root
}

// source names the file's one source in messages ("path escapes source
// "repo""): the root directory's name.
func (tf starTestFile) source() string {
	abs, err := filepath.Abs(tf.root)
	if err != nil || filepath.Base(abs) == string(filepath.Separator) {
		return "root"
	}
	return filepath.Base(abs)
}

// runStarTests runs every test of every test file under paths.
func runStarTests(ctx context.Context, stdout io.Writer, f *starTestFlags, paths []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var filter *regexp.Regexp
	if f.run != "" {
		var err error
		if filter, err = regexp.Compile(f.run); err != nil {
			return usageErr("test: --run: %w", err)
		}
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	files, err := findStarTests(paths)
	if err != nil {
		return usageErr("test: %w", err)
	}
	var passed, failedN int
	snaps := map[string]*engine.Snapshot{} // by root
	for _, tf := range files {
		snap, ok := snaps[tf.root]
		if !ok {
			if snap, err = source.Dir(tf.root, source.Limits{}); err != nil {
				return usageErr("test: %w", err)
			}
			snaps[tf.root] = snap
		}
		// What a test prints or fails with never shows the Secrets of
		// the tree it reads.
		out := &redactingWriter{w: stdout, r: engine.SnapshotRedactor(map[string]*engine.Snapshot{tf.source(): snap})}
		p, fl := runStarTestFile(ctx, out, f.limits, tf, engine.SnapshotFiles{tf.source(): snap}, filter)
		passed += p
		failedN += fl
	}
	if passed+failedN == 0 {
		return usageErr("test: no test_* functions in *_test.star files under %s", strings.Join(paths, ", "))
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failedN)
	if failedN > 0 {
		return failed(fmt.Errorf("test: %s failed", plural(failedN, "test")))
	}
	return nil
}

// runStarTestFile loads one test file and calls each of its test_*
// functions, in the order they are defined. A file that does not load is
// one failure.
func runStarTestFile(ctx context.Context, w io.Writer, limits lstar.Limits, tf starTestFile, files engine.SnapshotFiles, filter *regexp.Regexp) (passed, failedN int) {
	ctx = lstar.WithFiles(ctx, files, tf.source())
	in := lstar.New(lstar.Options{
		Predeclared: stdlib.Predeclared(),
		Limits:      limits,
		Print:       func(_ *starlark.Thread, msg string) { fmt.Fprintln(w, msg) },
		// Positions name files by their local path, so that a failure
		// names a file the user can open.
		FileName: func(_, p string) string { return filepath.Join(tf.root, filepath.FromSlash(p)) },
	})
	display := filepath.Join(tf.root, filepath.FromSlash(tf.rel))
	mod, err := in.Load(ctx, files, lstar.Script{Source: tf.source(), Path: tf.rel})
	if err != nil {
		fmt.Fprintf(w, "FAIL %s\n%s\n", display, indentError(err.Error()))
		return 0, 1
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
			failedN++
			continue
		}
		fmt.Fprintf(w, "PASS %s (%s)\n", t.name, t.pos)
		passed++
	}
	return passed, failedN
}

// indentError indents every line of an error message under its FAIL line.
func indentError(msg string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(msg, "\n"), "\n", "\n    ")
}

// findStarTests lists the *_test.star files under paths, in lexical order,
// each with the root load() resolves in: the directory given, or the
// directory of a file given by name.
func findStarTests(paths []string) ([]starTestFile, error) {
	var out []starTestFile
	seen := map[string]bool{}
	add := func(root, p string) error {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if key := filepath.Join(root, rel); !seen[key] {
			seen[key] = true
			out = append(out, starTestFile{root: root, rel: filepath.ToSlash(rel)})
		}
		return nil
	}
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, err
		}
		root = filepath.Clean(root)
		if !info.IsDir() {
			if !strings.HasSuffix(root, ".star") {
				return nil, fmt.Errorf("%s: not a .star file", root)
			}
			if err := add(filepath.Dir(root), root); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() && strings.HasSuffix(d.Name(), "_test.star") {
				return add(root, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// redactingWriter masks what a redactor knows in every write; each write
// must hold whole values (the test runner writes whole lines).
type redactingWriter struct {
	w io.Writer
	r *redact.Redactor
}

func (w *redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.r.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
