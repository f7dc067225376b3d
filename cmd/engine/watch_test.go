package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// watchSync is a ManifestSync whose transform is app/main.star.
const watchSync = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: app
    git: {url: https://git.example.com/web.git}
  transform:
    starlark: {source: app, path: main.star}
  targets:
  - name: dev
    namespace: web-dev
`

// watchScript is a transform that makes one ConfigMap with data.v = value
// (a Starlark expression).
func watchScript(value string) string {
	return `def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"v": ` + value + `}}]
`
}

// lineReader hands the lines a process writes to the test, with a time
// limit on each wait.
type lineReader struct {
	lines chan string
	seen  []string
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string, 1000)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lr.lines <- s.Text()
		}
		close(lr.lines)
	}()
	return lr
}

// expect reads lines until one matches re; it fails the test at the end
// of the output or after a minute.
func (lr *lineReader) expect(t *testing.T, what, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lr.lines:
			if !ok {
				t.Fatalf("%s: the output ended without %q; it was:\n%s", what, re, strings.Join(lr.seen, "\n"))
			}
			lr.seen = append(lr.seen, l)
			if rx.MatchString(l) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no %q within 20s; the output was:\n%s", what, re, strings.Join(lr.seen, "\n"))
		}
	}
}

// TestEvalWatch runs engine eval --watch and edits its script three times
// (once into an error, once by renaming a new file over it, which adds a
// load() of a new file), then edits the loaded file: each good edit is a
// render, the error keeps the last good render, and SIGINT ends it with
// status 0.
func TestEvalWatch(t *testing.T) {
	dir := t.TempDir()
	write := writer(t, dir)
	write("sync.yaml", watchSync)
	write("app/main.star", watchScript(`"1"`))

	cmd, out, errs := startWatch(t, dir)

	out.expect(t, "render 1", `^--- render 1 ---$`)
	out.expect(t, "render 1", `^  v: "1"$`)
	errs.expect(t, "render 1", `render 1 at .*watching for changes`)

	write("app/main.star", watchScript(`"2"`))
	out.expect(t, "render 2", `^--- render 2 ---$`)
	out.expect(t, "render 2", `^  v: "2"$`)
	errs.expect(t, "render 2", `render 2 at `)

	write("app/main.star", watchScript(`1 + "x"`))
	errs.expect(t, "the error", `^engine: target "dev": app/main.star:2:98: unknown binary op: int \+ string$`)
	errs.expect(t, "the error's line", `^2 \|     return .*"v": 1 \+ "x"`)
	errs.expect(t, "the error", `^engine: eval --watch: render 3 failed; keeping render 2, the last good one$`)

	// An editor that saves by writing a new file and renaming it over the
	// old one; the script now loads a file of a new directory.
	write("app/lib/v.star", `V = "4"`+"\n")
	write("app/main.star.new", "load(\"lib/v.star\", \"V\")\n"+watchScript(`V`))
	if err := os.Rename(filepath.Join(dir, "app/main.star.new"), filepath.Join(dir, "app/main.star")); err != nil {
		t.Fatal(err)
	}
	out.expect(t, "render 4", `^--- render [4-9] ---$`)
	out.expect(t, "render 4", `^  v: "4"$`)
	errs.expect(t, "render 4", `render [4-9] at `)

	// The new load() is watched.
	write("app/lib/v.star", `V = "5"`+"\n")
	out.expect(t, "the loaded file's edit", `^  v: "5"$`)

	stopWatch(t, cmd, out, errs, os.Interrupt)
	// The note that app is read from its local copy is said once, not at
	// every render.
	if n := strings.Count(strings.Join(errs.seen, "\n"), "read from the local copy"); n != 1 {
		t.Errorf("the local copy note is said %d times, want once:\n%s", n, strings.Join(errs.seen, "\n"))
	}
}

// writer returns a function that writes a file under dir.
func writer(t *testing.T, dir string) func(name, text string) {
	return func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startWatch starts engine eval --watch -f sync.yaml ARGS in dir.
func startWatch(t *testing.T, dir string, args ...string) (*exec.Cmd, *lineReader, *lineReader) {
	t.Helper()
	exe, err := exec.LookPath(programName)
	if err != nil {
		t.Fatalf("no %s on $PATH: %v", programName, err)
	}
	cmd := exec.Command(exe, append([]string{"eval", "--watch", "-f", "sync.yaml"}, args...)...)
	cmd.Dir = dir
	_, out, errs := start(t, cmd)
	return cmd, out, errs
}

// start starts cmd with its stdin, stdout and stderr piped to the test,
// and kills it when the test ends.
func start(t *testing.T, cmd *exec.Cmd) (io.Writer, *lineReader, *lineReader) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return stdin, newLineReader(stdout), newLineReader(stderr)
}

// stopWatch sends sig and checks that the process exits with status 0.
func stopWatch(t *testing.T, cmd *exec.Cmd, out, errs *lineReader, sig os.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	exitsZero(t, cmd, sig.String(), out, errs)
}

// exitsZero checks that cmd exits with status 0 within 10 seconds of
// what, reading the rest of its output into the readers meanwhile.
func exitsZero(t *testing.T, cmd *exec.Cmd, what string, readers ...*lineReader) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		// Drain what is left so that the process never blocks writing.
		for _, r := range readers {
			for l := range r.lines {
				r.seen = append(r.seen, l)
			}
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("eval --watch exited %d on %s, want 0", ee.ExitCode(), what)
		} else if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("eval --watch did not exit within 30s of %s", what)
	}
}

// TestEvalWatchDiff checks --diff: the first render whole, then a unified
// diff against the last good render, with Secret values masked; and
// SIGTERM ends it with status 0 too.
func TestEvalWatchDiff(t *testing.T) {
	dir := t.TempDir()
	write := writer(t, dir)
	write("sync.yaml", watchSync)
	secret := func(token, v string) string {
		return `def main(ctx):
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "` + token + `"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"v": "` + v + `"}},
    ]
`
	}
	write("app/main.star", secret("tok-one-1234", "1"))
	cmd, out, errs := startWatch(t, dir, "--diff")
	out.expect(t, "render 1", `^--- render 1 ---$`)
	out.expect(t, "render 1", `^  v: "1"$`)
	errs.expect(t, "render 1", `render 1 at `)

	write("app/main.star", secret("tok-two-5678", "2"))
	out.expect(t, "render 2", `^--- render 2 ---$`)
	out.expect(t, "the diff", `^--- render 1$`)
	out.expect(t, "the diff", `^\+\+\+ render 2$`)
	out.expect(t, "the diff", `^-  v: "1"$`)
	out.expect(t, "the diff", `^\+  v: "2"$`)
	errs.expect(t, "render 2", `render 2 at `)

	write("app/main.star", secret("tok-two-5678", "2")+"\n")
	out.expect(t, "render 3", `^--- render 3 ---$`)
	out.expect(t, "no change", `^\(no change\)$`)

	stopWatch(t, cmd, out, errs, syscall.SIGTERM)
	all := strings.Join(append(out.seen, errs.seen...), "\n")
	if strings.Contains(all, "tok-") || !strings.Contains(all, "token: '***'") {
		t.Errorf("the Secret's value is not masked:\n%s", all)
	}
}

// TestEvalWatchTerminal runs eval --watch on a terminal (script(1) gives
// it one): each render clears the screen instead of a separator, a
// failed render shows the last good output again, the error's line is in
// colour (but not with NO_COLOR), and Ctrl-C ends it with status 0.
func TestEvalWatchTerminal(t *testing.T) {
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skipf("no script(1) to give eval --watch a terminal: %v", err)
	}
	exe, err := exec.LookPath(programName)
	if err != nil {
		t.Fatalf("no %s on $PATH: %v", programName, err)
	}
	for _, noColor := range []bool{false, true} {
		dir := t.TempDir()
		write := writer(t, dir)
		write("sync.yaml", watchSync)
		write("app/main.star", watchScript(`"1"`))
		// script(1) runs the command with $SHELL -c; exec makes the
		// engine its child whatever the shell. A shell left in between
		// gets the Ctrl-C too, and dash then dies of it (status 130)
		// however the engine exits.
		cmd := exec.Command(scriptCmd, "-qfec", "exec "+exe+" eval --watch -f sync.yaml", "/dev/null")
		cmd.Env = append(os.Environ(), "SHELL=/bin/sh")
		cmd.Dir = dir
		cmd.Env = append(cmd.Env, "TERM=xterm")
		if noColor {
			cmd.Env = append(cmd.Env, "NO_COLOR=1")
		}
		stdin, out, errs := start(t, cmd)
		out.expect(t, "render 1", `^`+regexp.QuoteMeta(clearScreen)+`# target: dev`)
		out.expect(t, "render 1", `render 1 at .*watching for changes`)
		write("app/main.star", watchScript(`1 + "x"`))
		out.expect(t, "the last good output again", `^`+regexp.QuoteMeta(clearScreen)+`# target: dev`)
		out.expect(t, "the last good output again", `^  v: "1"`)
		out.expect(t, "the error", `^engine: target "dev": app/main.star:2:98: unknown binary op`)
		caret := `^ *\|.* \^`
		if !noColor {
			caret = `^` + regexp.QuoteMeta(ansi.gutter+"  |"+ansi.reset) + ` +` + regexp.QuoteMeta(ansi.caret+"^"+ansi.reset)
		}
		out.expect(t, "the caret", caret)
		out.expect(t, "the error", `render 2 failed; keeping render 1`)
		if _, err := stdin.Write([]byte{0x03}); err != nil { // Ctrl-C
			t.Fatal(err)
		}
		exitsZero(t, cmd, "Ctrl-C", out, errs)
		all := strings.Join(out.seen, "\n")
		if strings.Contains(all, "--- render") {
			t.Errorf("a separator on a terminal:\n%s", all)
		}
		if noColor && strings.Contains(all, "\x1b[1;31m") {
			t.Errorf("colour with NO_COLOR:\n%s", all)
		}
	}
}

// TestWatchCounts checks which changes call for a render: the sync file,
// a one-file source, anything in a local source's tree, but not an
// editor's scratch files nor other files beside the sync file.
func TestWatchCounts(t *testing.T) {
	w := &watcher{files: map[string]bool{"sync.yaml": true, "tls.yaml": true}, trees: []string{"app"}}
	for name, want := range map[string]bool{
		"sync.yaml":          true,
		"./tls.yaml":         true,
		"app/main.star":      true,
		"app/lib/x.star":     true,
		"app":                true,
		"app/.main.star.swp": false,
		"app/main.star~":     false,
		"app/4913":           false,
		"app/.#main.star":    false,
		"notes.md":           false,
		"apple/x.star":       false,
	} {
		if got := w.counts(name); got != want {
			t.Errorf("counts(%q) = %v, want %v", name, got, want)
		}
	}
}
