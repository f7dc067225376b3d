//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A repository a CI run checks out may hold special files where the CLI
// reads the user's files: a FIFO named like a source beside sync.yaml (its
// open blocks until a writer comes: eval and vet hung there, past
// --timeout), a FIFO as sync.yaml, one inside a source directory, a link
// to /dev/zero (endless), a unix socket; and where eval writes, a FIFO or
// a link out of --out-dir. Each is refused at once, naming it, and the
// command exits 2.

// specialSync is a ManifestSync whose transform reads source app, a git
// source whose local copy beside it (app/ or app.yaml) eval reads.
const specialSync = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: special, namespace: ci}
spec:
  sources:
  - name: app
    git: {url: %s, ref: {branch: main}}
  transform:
    starlark: {source: app, path: transform.star}
  targets:
  - {name: dev, namespace: dev}
`

const specialTransform = `def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]
`

// refusedBound tells a refusal from a hang: the commands below run with
// --timeout 1m and are refused in well under a second on an idle machine;
// without the checks they block until the deadline (or, before it, for
// ever). The margin is for a loaded machine.
const refusedBound = 30 * time.Second

// hangLimit is when a command that blocked is killed, by its pid, so that
// a regression fails the test instead of hanging it.
const hangLimit = 2 * time.Minute

// runEngineWithin runs the engine command as runEngine does, with stdin,
// killing it after hangLimit; elapsed says how long it took.
func runEngineWithin(t *testing.T, dir string, stdin io.Reader, args ...string) engineRun {
	t.Helper()
	exe, err := exec.LookPath(programName)
	if err != nil {
		t.Fatalf("no %s on $PATH: %v", programName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Dir = dir
	cmd.Stdin = stdin
	cmd.WaitDelay = time.Second // a worker holding the pipes open
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	r := engineRun{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("engine %s: still running after %v: it hung (killed)\n%s", strings.Join(args, " "), hangLimit, r.stderr)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("engine %s: %v", strings.Join(args, " "), err)
	}
	r.code = cmd.ProcessState.ExitCode()
	t.Logf("engine %s: exit %d in %s\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stderr)
	return r
}

// specialTree writes a ManifestSync of a git source at url in dir, with a
// transform in app/ unless noCopy.
func specialTree(t *testing.T, url string, noCopy bool) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"sync.yaml": fmt.Sprintf(specialSync, url)}
	if !noCopy {
		files["app/transform.star"] = specialTransform
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// special makes a special file at p: "fifo", "socket" or "zero" (a link
// to /dev/zero). A FIFO is opened for writing at the end (O_RDWR never
// blocks), so that a reader that blocked on it returns.
func special(t *testing.T, p, kind string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "fifo":
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				f.Close()
			}
		})
	case "socket":
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	case "zero":
		if err := os.Symlink("/dev/zero", p); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("special file %q", kind)
	}
}

func TestSpecialFilesRefused(t *testing.T) {
	const url = "https://git.example.com/app.git"
	for _, c := range []struct {
		name   string
		noCopy bool              // no app/ beside sync.yaml
		files  map[string]string // relative path: kind
		args   []string
		want   string // in stderr
	}{
		{"fifo named like a source beside sync.yaml", true, map[string]string{"app.yaml": "fifo"},
			[]string{"eval", "-f", "sync.yaml"}, `sync.yaml: source "app": app.yaml: not a regular file (named pipe)`},
		{"vet: fifo named like a source", true, map[string]string{"app.yaml": "fifo"},
			[]string{"vet", "sync.yaml"}, `sync.yaml:6: source "app": app.yaml: not a regular file (named pipe)`},
		{"fifo as sync.yaml", false, map[string]string{"fifo.yaml": "fifo"},
			[]string{"eval", "-f", "fifo.yaml"}, "fifo.yaml: not a regular file (named pipe)"},
		{"vet: fifo named on the command line", false, map[string]string{"fifo.yaml": "fifo"},
			[]string{"vet", "fifo.yaml"}, "fifo.yaml: not a regular file (named pipe)"},
		{"vet: fifo in a directory", false, map[string]string{"more/fifo.yaml": "fifo"},
			[]string{"vet", "."}, "more/fifo.yaml: not a regular file (named pipe)"},
		{"diff: fifo as sync.yaml", false, map[string]string{"fifo.yaml": "fifo"},
			[]string{"diff", "-f", "fifo.yaml", "--kubeconfig", "/nonexistent"}, "fifo.yaml: not a regular file (named pipe)"},
		{"fifo inside a source directory", false, map[string]string{"app/lib/values.yaml": "fifo"},
			[]string{"eval", "-f", "sync.yaml"}, `source "app": ` + filepath.Join("app", "lib", "values.yaml") + ": not a regular file (named pipe)"},
		{"link to /dev/zero inside a source directory", false, map[string]string{"app/zero.yaml": "zero"},
			[]string{"eval", "-f", "sync.yaml"}, filepath.Join("app", "zero.yaml") + ": symlink resolves outside app"},
		{"socket inside a source directory", false, map[string]string{"app/app.sock": "socket"},
			[]string{"vet", "sync.yaml"}, filepath.Join("app", "app.sock") + ": not a regular file (socket)"},
		{"--source of a fifo", false, map[string]string{"elsewhere/app.yaml": "fifo"},
			[]string{"eval", "-f", "sync.yaml", "--source", "app=elsewhere/app.yaml"}, "elsewhere/app.yaml: not a regular file (named pipe)"},
		{"--namespaces of a fifo", false, map[string]string{"ns.yaml": "fifo"},
			[]string{"eval", "-f", "sync.yaml", "--namespaces", "ns.yaml"}, "ns.yaml: not a regular file (named pipe)"},
		{"--policy with a fifo", false, map[string]string{"policy/policy.cue": "fifo"},
			[]string{"vet", "sync.yaml", "--policy", "policy"}, "policy/policy.cue: not a regular file (named pipe)"},
		{"test: fifo beside a test file", false, map[string]string{"app/data.yaml": "fifo"},
			[]string{"test", "app"}, "app/data.yaml: not a regular file (named pipe)"},
		{"fmt: fifo named .star", false, map[string]string{"app/lib.star": "fifo"},
			[]string{"fmt", "app"}, "app/lib.star: not a regular file (named pipe)"},
		{"fmt: fifo named on the command line", false, map[string]string{"app/lib.star": "fifo"},
			[]string{"fmt", "app/lib.star"}, "app/lib.star: not a regular file (named pipe)"},
		{"eval --out-dir holding a fifo", false, map[string]string{"out/dev.yaml": "fifo"},
			[]string{"eval", "-f", "sync.yaml", "--out-dir", "out"}, "out/dev.yaml: not a regular file (named pipe)"},
		{"eval --out-dir holding a link to /dev/zero", false, map[string]string{"out/dev.yaml": "zero"},
			[]string{"eval", "-f", "sync.yaml", "--out-dir", "out"}, "out/dev.yaml: symlink resolves outside out"},
		{"status: --kubeconfig of a fifo", false, map[string]string{"kc": "fifo"},
			[]string{"status", "--kubeconfig", "kc"}, "status: kubeconfig: kc: not a regular file (named pipe)"},
		{"history: $KUBECONFIG of a fifo", false, map[string]string{"kc": "fifo"},
			[]string{"history", "web"}, "history: kubeconfig: kc: not a regular file (named pipe)"},
		{"diff --base: fifo in the working tree", false, map[string]string{"more.yaml": "fifo"},
			[]string{"diff", "--base", "HEAD", "."}, "more.yaml: not a regular file (named pipe)"},
		{"diff --base: fifo named like a source", false, map[string]string{"app/values.yaml": "fifo"},
			[]string{"diff", "--base", "HEAD", "sync.yaml"}, filepath.Join("app", "values.yaml") + ": not a regular file (named pipe)"},
		{"diff: --kubeconfig of a link to /dev/zero", false, map[string]string{"kc": "zero"},
			[]string{"diff", "-f", "sync.yaml", "--kubeconfig", "kc"}, "diff: kubeconfig: kc: not a regular file (character device)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := specialTree(t, url, c.noCopy)
			if c.args[0] == "test" {
				if err := os.WriteFile(filepath.Join(dir, "app", "transform_test.star"), []byte("def test_ok():\n    pass\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if slices.Contains(c.args, "--base") {
				gitRun(t, dir, "init", "-q")
				gitRun(t, dir, "add", "-A")
				gitRun(t, dir, "commit", "-q", "-m", "base")
			}
			for p, kind := range c.files {
				special(t, filepath.Join(dir, filepath.FromSlash(p)), kind)
			}
			if c.args[0] == "history" {
				t.Setenv("KUBECONFIG", "kc") // relative to the command's directory
			}
			args := c.args
			if args[0] != "fmt" && args[0] != "status" && args[0] != "history" {
				args = append(args, "--timeout", "1m")
			}
			r := runEngineWithin(t, dir, nil, args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, c.want)
			}
			if r.elapsed > refusedBound {
				t.Errorf("refused after %v, want within %v", r.elapsed, refusedBound)
			}
		})
	}
}

// What can still block, a git server that accepts connections and never
// answers and a stdin that never ends, does not hold the command past
// --timeout: it returns at the deadline, naming what it waited on.
func TestReadsEndAtTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 100)
	defer func() {
		l.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case held <- c: // never answered
			default:
				c.Close()
			}
		}
	}()
	const timeout = 3 * time.Second
	// Without the deadline the command waits for the server (minutes) or
	// stdin (for ever): the bound tells the deadline from either.
	const bound = timeout + 20*time.Second
	url := "http://" + l.Addr().String() + "/app.git"

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close() // held open: stdin never ends
	defer stdinR.Close()

	for _, c := range []struct {
		name  string
		stdin io.Reader
		args  []string
		want  string
	}{
		{"git server that never answers", nil, []string{"eval", "-f", "sync.yaml"},
			"sync.yaml: reading its sources: still reading after 3s (--timeout)"},
		{"vet: git server that never answers", nil, []string{"vet", "sync.yaml"},
			"sync.yaml: reading its sources: still reading after 3s (--timeout)"},
		{"stdin that never ends", stdinR, []string{"eval", "-f", "sync.yaml", "--namespaces", "-"},
			"stdin: still reading after 3s (--timeout)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := specialTree(t, url, true)
			r := runEngineWithin(t, dir, c.stdin, append(c.args, "--timeout", timeout.String())...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr %q, want it to contain %q", r.stderr, c.want)
			}
			if r.elapsed < timeout || r.elapsed > bound {
				t.Errorf("returned after %v, want at the --timeout of %v (within %v)", r.elapsed, timeout, bound)
			}
		})
	}
}
