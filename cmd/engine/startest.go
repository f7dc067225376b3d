package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/startest"
	"github.com/manifestsync/manifestsync/internal/plural"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// starTestFlags are the flags of engine test.
type starTestFlags struct {
	run       string
	update    bool
	limits    lstar.Limits
	maxMemory string
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

Snapshot tests compare a value with a golden file:
assert.golden(got, "testdata/dev.yaml") fails with a diff when they
differ. --update makes it pass and write got into the file instead (a
path in the tree the test file was found under); each file that changes
is named ("updated PATH").

Each file runs in a worker process: its memory is bounded by --max-memory,
and the wall-clock time of the whole file (its load and all its tests) by
--timeout. A file past either ends the run with an error naming the limit
and the file.

Exit status: 0 all passed, 1 a test failed, 2 usage error, no tests, or a
file stopped at --max-memory or --timeout.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStarTests(cmd.Context(), cmd.OutOrStdout(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.run, "run", "", "REGEXP: run only the tests whose name matches")
	fl.BoolVar(&f.update, "update", false, "rewrite the golden files of assert.golden with what the tests give")
	d := lstar.DefaultLimits()
	fl.Uint64Var(&f.limits.MaxSteps, "max-steps", d.MaxSteps, "Starlark execution steps per file load and per test")
	fl.DurationVar(&f.limits.Timeout, "timeout", d.Timeout, "wall-clock limit of a test file: its load and all its tests")
	addMaxMemoryFlag(fl, &f.maxMemory)
	return cmd
}

// runStarTests runs every test of every test file under paths.
func runStarTests(ctx context.Context, stdout io.Writer, f *starTestFlags, paths []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.run != "" {
		if _, err := regexp.Compile(f.run); err != nil {
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
	pool, stop, err := newSandbox("test", f.maxMemory, f.limits.Timeout)
	if err != nil {
		return err
	}
	defer stop()
	var passed, failedN int
	snaps := map[string]*engine.Snapshot{} // by root
	for _, tf := range files {
		snap, ok := snaps[tf.Root]
		if !ok {
			rctx, timeout, cancel := readDeadline(ctx, f.limits.Timeout)
			snap, err = readWithin(rctx, timeout, tf.Root, func(context.Context) (*engine.Snapshot, error) {
				return source.Dir(tf.Root, source.Limits{})
			})
			cancel()
			if err != nil {
				return usageErr("test: %w", err)
			}
			snaps[tf.Root] = snap
		}
		tf.Snapshot = snap
		// What a test prints or fails with never shows the Secrets of
		// the tree it reads.
		out := &redactingWriter{w: stdout, r: engine.SnapshotRedactor(map[string]*engine.Snapshot{tf.Root: snap})}
		p, fl, goldens, err := pool.RunTest(ctx, out, tf, f.limits, f.run, f.update)
		if err, ok := killed("test: "+tf.Display(), err); ok {
			return err
		}
		if err != nil {
			return usageErr("test: %s: %w", tf.Display(), err)
		}
		if err := writeGoldens(stdout, tf, goldens); err != nil {
			return usageErr("test: %s: %w", tf.Display(), err)
		}
		passed += p
		failedN += fl
	}
	if passed+failedN == 0 {
		return usageErr("test: no test_* functions in *_test.star files under %s", strings.Join(paths, ", "))
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failedN)
	if failedN > 0 {
		return failed(fmt.Errorf("test: %s failed", plural.Count(failedN, "test")))
	}
	return nil
}

// findStarTests lists the *_test.star files under paths, in lexical order,
// each with the root load() resolves in: the directory given, or the
// directory of a file given by name.
func findStarTests(paths []string) ([]startest.File, error) {
	var out []startest.File
	seen := map[string]bool{}
	add := func(root, p string) error {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if key := filepath.Join(root, rel); !seen[key] {
			seen[key] = true
			out = append(out, startest.File{Root: root, Rel: filepath.ToSlash(rel), Source: sourceName(root)})
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

// writeGoldens writes the golden files a test file's assert.golden
// recorded under --update into its tree, naming each that changes.
func writeGoldens(stdout io.Writer, tf startest.File, goldens []stdlib.Golden) error {
	for _, g := range goldens {
		if g.Source != tf.Source {
			return fmt.Errorf("golden file @%s//%s: not in the test's tree %s", g.Source, g.Path, tf.Root)
		}
		p := filepath.Join(tf.Root, filepath.FromSlash(g.Path))
		old, err := source.ReadFile(tf.Root, g.Path)
		var (
			ne *source.NotRegularError
			se *source.SymlinkError
		)
		if errors.As(err, &ne) || errors.As(err, &se) {
			return err // a FIFO, a device or a link out of the tree
		}
		if err == nil && bytes.Equal(old, g.Data) {
			continue
		}
		if err := source.WriteFileIn(tf.Root, g.Path, g.Data, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "updated %s\n", p)
	}
	return nil
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

// sourceName names a test file's one source in messages ("path escapes
// source "repo""): the root directory's name.
func sourceName(root string) string {
	abs, err := filepath.Abs(root)
	if err != nil || filepath.Base(abs) == string(filepath.Separator) {
		return "root"
	}
	return filepath.Base(abs)
}
