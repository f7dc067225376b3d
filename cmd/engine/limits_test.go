package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/txtar"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The offline commands evaluate user code in a worker process, bounded by
// --max-memory and by one --timeout over load, compile, run and validate
// (issue 12, hole 4). These tests run the engine command as CI would, and
// measure the peak resident size of it and its worker.

// limitFixtures are a ManifestSync whose transform builds six 1 GiB
// strings, a Starlark test file that does the same, a ManifestSync whose
// CUE transform is a comprehension over 3M items, and a CUE policy package
// with that comprehension.
const limitFixtures = `
-- bomb/app/transform.star --
def main(ctx):
    half = "x" * (1 << 29)
    big = [half + half + str(i) for i in range(6)]
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": str(len(big))}}]
-- startest/bomb_test.star --
def test_small():
    print("before the bomb")

def test_bomb():
    half = "x" * (1 << 29)
    big = [half + half + str(i) for i in range(6)]
    assert.eq(len(big), 6)
-- cue/app/gen/objects.cue --
package gen

import "list"

// 3M iterations; CUE compiles this with no context to stop it.
_n: [for i in list.Range(0, 2000, 1) for j in list.Range(0, 1500, 1) if i*j < 0 {i}]
objects: [{apiVersion: "v1", kind: "ConfigMap", metadata: name: "c", data: n: "\(len(_n))"}]
-- loop/app/transform.star --
def main(ctx):
    for i in range(1 << 40):
        pass
-- slowpolicy/policy.cue --
package policy

import "list"

_n: [for i in list.Range(0, 2000, 1) for j in list.Range(0, 1500, 1) if i*j < 0 {i}]
#Object: {_count: len(_n), ...}
`

// limitSync is the ManifestSync of the fixtures bomb/ and cue/, by name
// and transform.
const limitSync = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: %s, namespace: ci}
spec:
  sources:
  - name: app
    git: {url: https://git.example.com/app.git, ref: {branch: main}}
  transform:
    %s
  targets:
  - {name: dev, namespace: dev}
`

// engineRun is one run of the engine command.
type engineRun struct {
	code    int
	stdout  string
	stderr  string
	maxRSS  int64 // bytes, of the command and the workers it waited for
	elapsed time.Duration
}

// runEngine runs the engine command testscript puts on $PATH in dir.
func runEngine(t *testing.T, dir string, args ...string) engineRun {
	t.Helper()
	exe, err := exec.LookPath(programName)
	if err != nil {
		t.Fatalf("no %s on $PATH: %v", programName, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	r := engineRun{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("engine %s: %v", strings.Join(args, " "), err)
	}
	r.code = cmd.ProcessState.ExitCode()
	// wait4's usage of a child counts its own waited-for children: the
	// peak is that of the command or of its worker, whichever was larger.
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10
	}
	t.Logf("engine %s: exit %d in %s, peak RSS %d MiB\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.maxRSS>>20, r.stderr)
	return r
}

// exampleDir is the absolute path of examples/NAME.
func exampleDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("../../examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func limitFixtureDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := txtar.Parse([]byte(limitFixtures)).Files
	files = append(files,
		txtar.File{Name: "bomb/sync.yaml", Data: fmt.Appendf(nil, limitSync, "bomb", "starlark: {source: app, path: transform.star}")},
		txtar.File{Name: "cue/sync.yaml", Data: fmt.Appendf(nil, limitSync, "slow", "cue: {source: app, path: gen, expression: objects}")},
		txtar.File{Name: "loop/sync.yaml", Data: fmt.Appendf(nil, limitSync, "loop", "starlark: {source: app, path: transform.star}")})
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMemoryLimit: six 1 GiB strings under eval, vet and test end with the
// memory error and exit 2, and neither the command nor its worker grows
// much past --max-memory.
func TestMemoryLimit(t *testing.T) {
	dir := limitFixtureDir(t)
	q := resource.MustParse(testWorkerLimit)
	limit := q.Value()
	wantMsg := "evaluation exceeded its memory limit of " + strings.TrimSuffix(testWorkerLimit, "Mi") + " MiB (--max-memory)"
	for _, c := range []struct {
		name  string
		args  []string
		names string // what the error must name: the ManifestSync or the file
	}{
		{"eval", []string{"eval", "-f", "bomb/sync.yaml"}, "bomb/sync.yaml: "},
		{"vet", []string{"vet", "bomb"}, "bomb/sync.yaml:1: ManifestSync ci/bomb: "},
		{"test", []string{"test", "startest"}, "test: startest/bomb_test.star: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runEngine(t, dir, append(c.args, "--max-memory", testWorkerLimit)...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, c.names+wantMsg) {
				t.Errorf("stderr %q, want %q", r.stderr, c.names+wantMsg)
			}
			if strings.Contains(r.stderr, "no findings") {
				t.Errorf("vet said no findings after a killed evaluation: %q", r.stderr)
			}
			if bound := limit + testRSSSlack; r.maxRSS > bound {
				t.Errorf("peak RSS %d MiB, want at most %d MiB", r.maxRSS>>20, bound>>20)
			}
		})
	}
	// engine test keeps what the file printed and its PASS lines up to
	// the kill.
	r := runEngine(t, dir, "test", "startest", "--max-memory", testWorkerLimit)
	if want := "before the bomb\nPASS test_small (startest/bomb_test.star:1)\n"; r.stdout != want {
		t.Errorf("engine test: stdout %q, want %q", r.stdout, want)
	}
}

// TestTimeoutCoversCUE: a CUE comprehension over 3M items, in a transform
// (compiled when the evaluation loads) or a --policy package, is stopped
// at --timeout even though CUE has no context to stop it with.
func TestTimeoutCoversCUE(t *testing.T) {
	dir := limitFixtureDir(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"eval", []string{"eval", "-f", "cue/sync.yaml"}, "engine: cue/sync.yaml: evaluation was killed: timeout of 2s exceeded (--timeout)\n"},
		{"vet", []string{"vet", "cue"}, "cue/sync.yaml:1: ManifestSync ci/slow: evaluation was killed: timeout of 2s exceeded (--timeout)\n"},
		{"vet policy", []string{"vet", exampleDir(t, "starlark-app"), "--policy", "slowpolicy"}, "engine: vet: --policy slowpolicy: evaluation was killed: timeout of 2s exceeded (--timeout)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The default --max-memory leaves CUE room to run out of
			// time first.
			r := runEngine(t, dir, append(c.args, "--timeout", "2s")...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q, want %q", r.stderr, c.want)
			}
			// 2s, the kill's grace, a worker start, and room for a
			// machine at load 15: less than the minute CUE takes idle.
			if r.elapsed > 30*time.Second {
				t.Errorf("took %s under --timeout 2s", r.elapsed)
			}
		})
	}
}

// TestMaxMemoryFlag: --max-memory is a quantity of at least 128Mi.
func TestMaxMemoryFlag(t *testing.T) {
	sync := filepath.Join(exampleDir(t, "starlark-app"), "sync.yaml")
	for _, bad := range []string{"lots", "0", "-1", "64Mi"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"eval", "-f", sync, "--max-memory", bad}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--max-memory") {
			t.Errorf("--max-memory %s: exit %d, %q", bad, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"eval", "-f", sync, "--max-memory", testWorkerLimit}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "kind: ConfigMap") {
		t.Errorf("--max-memory %s: exit %d, %q %q", testWorkerLimit, code, stdout.String(), stderr.String())
	}
}

// TestDiffMemoryLimit: engine diff evaluates in a worker too: the bomb
// ends with the memory error and exit 2 before anything is compared.
func TestDiffMemoryLimit(t *testing.T) {
	needCluster(t)
	dir := limitFixtureDir(t)
	r := runEngine(t, dir, "diff", "-f", "bomb/sync.yaml", "--kubeconfig", cluster.kubeconfig, "--context", "envtest", "--max-memory", testWorkerLimit)
	want := "engine: bomb/sync.yaml: evaluation exceeded its memory limit of " + strings.TrimSuffix(testWorkerLimit, "Mi") + " MiB (--max-memory)\n"
	if r.code != exitUsage || r.stderr != want {
		t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitUsage, want)
	}
	q := resource.MustParse(testWorkerLimit)
	if bound := q.Value() + testRSSSlack; r.maxRSS > bound {
		t.Errorf("peak RSS %d MiB, want at most %d MiB", r.maxRSS>>20, bound>>20)
	}
}

// TestStarlarkTimeoutExit: a transform that Starlark's own timeout stops,
// before the worker's kill, exits 2 as a kill does, with the script's line
// (and the line shown).
func TestStarlarkTimeoutExit(t *testing.T) {
	dir := limitFixtureDir(t)
	r := runEngine(t, dir, "eval", "-f", "loop/sync.yaml", "--timeout", "500ms", "--max-steps", "100000000000")
	want := `note: source "app": read from the local copy loop/app, not fetched from https://git.example.com/app.git at {branch: main}
engine: target "dev": loop/app/transform.star:2:5: timeout of 500ms exceeded (--timeout)
  --> loop/app/transform.star:2:5
  |
2 |     for i in range(1 << 40):
  |     ^
`
	if r.code != exitUsage || r.stderr != want {
		t.Errorf("exit %d, stderr %q; want %d, %q", r.code, r.stderr, exitUsage, want)
	}
}
