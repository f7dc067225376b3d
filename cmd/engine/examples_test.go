package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// TestExamples evaluates every example under examples/ the way its README
// does (engine eval -f sync.yaml, sources beside it) and compares the output
// with the example's expected.yaml or, for an example that must fail, its
// expected.err (exit status 1 and what eval printed on stderr); engine vet
// of the example must exit the same way, and an example with a transform
// must ship *_test.star files that engine test of the example finds and
// passes. With -update it rewrites them.
//
// An example can list extra eval arguments in eval.args, where $DIR is the
// example's directory; those that point a git source at $GIT/NAME.git make
// the test fetch it for real: it publishes the example's local copy NAME/
// as NAME.git on a git daemon on 127.0.0.1 and replaces $GIT with the
// daemon's URL.
func TestExamples(t *testing.T) {
	syncs, err := filepath.Glob("../../examples/*/sync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(syncs) < 2 {
		t.Fatalf("found %d examples, want at least 2", len(syncs))
	}
	for _, sync := range syncs {
		dir := filepath.Dir(sync)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := exampleArgs(t, dir)
			var stdout, stderr bytes.Buffer
			vetPath := dir
			code := run(append([]string{"eval", "-f", sync}, args...), &stdout, &stderr)
			want, got, wantCode := filepath.Join(dir, "expected.yaml"), stdout.Bytes(), 0
			if _, err := os.Stat(filepath.Join(dir, "expected.err")); err == nil {
				want, got, wantCode = filepath.Join(dir, "expected.err"), stderr.Bytes(), 1
			}
			if code != wantCode {
				t.Fatalf("exit %d, want %d: %s", code, wantCode, stderr.String())
			}
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, got) {
				t.Errorf("output differs from %s (run go test ./cmd/engine -run TestExamples -update to rewrite):\n%s", want, got)
			}
			// engine vet agrees: a clean example has no findings, a
			// failing one has.
			stdout.Reset()
			stderr.Reset()
			if code := run(append([]string{"vet", vetPath}, sopsKeyArgs(args)...), &stdout, &stderr); code != wantCode {
				t.Errorf("engine vet %s: exit %d, want %d:\n%s%s", vetPath, code, wantCode, stdout.String(), stderr.String())
			}
			// An example with a transform ships tests of it, and they
			// pass, as its README runs them.
			if hasTransform(t, sync) {
				stdout.Reset()
				stderr.Reset()
				if code := run([]string{"test", dir}, &stdout, &stderr); code != 0 {
					t.Errorf("engine test %s: exit %d (an example with a transform ships *_test.star tests that pass):\n%s%s", dir, code, stdout.String(), stderr.String())
				} else if !regexp.MustCompile(`(?m)^[1-9][0-9]* passed, 0 failed$`).Match(stdout.Bytes()) {
					t.Errorf("engine test %s: no test passed:\n%s", dir, stdout.String())
				}
			}
		})
	}
}

// sopsKeyArgs are the --sops-age-key-file arguments of an example's eval
// arguments: vet needs the key as eval does.
func sopsKeyArgs(args []string) []string {
	for i, a := range args {
		if a == "--sops-age-key-file" && i+1 < len(args) {
			return args[i : i+2]
		}
	}
	return nil
}

// hasTransform reports whether the ManifestSync in the file sync has a
// transform.
func hasTransform(t *testing.T, sync string) bool {
	t.Helper()
	data, err := os.ReadFile(sync)
	if err != nil {
		t.Fatal(err)
	}
	f, err := engine.LoadSyncFile(sync, data)
	if err != nil {
		t.Fatal(err)
	}
	return f.Sync.Spec.Transform != nil
}

// exampleArgs returns the extra eval arguments of the example in dir, from
// its eval.args. Each $GIT/NAME.git they name is served first: the
// example's local copy NAME/, published on a git daemon on 127.0.0.1.
func exampleArgs(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "eval.args"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	repos := regexp.MustCompile(`\$GIT/([A-Za-z0-9_-]+)\.git`).FindAllStringSubmatch(string(b), -1)
	url := ""
	if len(repos) > 0 {
		root := gittest.TempDir(t)
		for _, r := range repos {
			if _, err := os.Stat(filepath.Join(root, r[1]+".git")); err != nil {
				gittest.Publish(t, root, r[1], filepath.Join(dir, r[1]))
			}
		}
		url = gittest.Daemon(t, root)
		// Fetched repositories are cached under the user cache directory.
		t.Setenv("XDG_CACHE_HOME", gittest.TempDir(t))
	}
	var args []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			line = strings.NewReplacer("$GIT", url, "$DIR", dir).Replace(line)
			args = append(args, strings.Fields(line)...)
		}
	}
	return args
}
