// Package gittest runs real git servers on 127.0.0.1 for tests: git daemon
// for git://, and the helpers the git source's tests build their https and
// ssh servers with. Each server is started by the test that uses it and
// stopped by t.Cleanup.
package gittest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreePort returns a port on 127.0.0.1 that nothing listens on.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// StartServer starts the server newCmd makes for a free port on
// 127.0.0.1, runs it in its own process group until the test ends, and
// waits until it accepts connections. As another process may take the
// port first, it tries three ports.
func StartServer(t *testing.T, newCmd func(port int) *exec.Cmd) int {
	t.Helper()
	var err error
	for range 3 {
		port := FreePort(t)
		if err = startProcess(t, newCmd(port), port); err == nil {
			return port
		}
	}
	t.Fatal(err)
	return 0
}

// startProcess starts cmd and waits until it listens on port. The test's
// cleanup kills it.
func startProcess(t *testing.T, cmd *exec.Cmd, port int) error {
	t.Helper()
	var out Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
		}
	})
	switch err := WaitListening(port, exited, 5*time.Second); {
	case errors.Is(err, ErrExited):
		return fmt.Errorf("%s exited before listening:\n%s", cmd.Path, out.String())
	case err != nil:
		t.Fatalf("%s: %v\n%s", cmd.Path, err, out.String())
	}
	return nil
}

// ErrExited is WaitListening's error when the server exited first.
var ErrExited = errors.New("the server exited before listening")

// WaitListening waits, at most within, until something accepts
// connections on 127.0.0.1:port, and gives up with ErrExited once exited
// is closed (the server's process ended).
func WaitListening(port int, exited <-chan struct{}, within time.Duration) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent writes: a server's output.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ServerEnv is the environment of git servers: no user or system
// configuration.
func ServerEnv(t *testing.T) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + TempDir(t),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
	}
}

// TempDir is t.TempDir for directories that git servers and commands use:
// git may still write into them for a moment after the command or server
// is gone (a detached gc, a child of a killed daemon), which makes
// t.TempDir's own removal fail the test. Its removal retries for a few
// seconds and only logs what it could not remove.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gittest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("gittest: leaving %s: %v", dir, err)
	})
	return dir
}

// Daemon publishes the bare repositories under root over git:// and
// returns the URL of root: a repository root/NAME.git is at URL + "/NAME.git".
func Daemon(t *testing.T, root string) string {
	t.Helper()
	env := ServerEnv(t)
	port := StartServer(t, func(port int) *exec.Cmd {
		cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
			"--base-path="+root, "--listen=127.0.0.1", "--port="+strconv.Itoa(port))
		cmd.Env = env
		return cmd
	})
	return "git://127.0.0.1:" + strconv.Itoa(port)
}

// Publish makes the bare repository root/NAME.git whose branch main holds
// one commit of the files of dir, with a fixed author and date so that its
// hash is the same on every run, and returns the commit's hash.
func Publish(t *testing.T, root, name, dir string) string {
	t.Helper()
	hash, err := PublishDir(root, name, dir, TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

// PublishDir is Publish for programs (the demo): work is an empty scratch
// directory, which also serves as git's HOME.
func PublishDir(root, name, dir, work string) (string, error) {
	bare := filepath.Join(root, name+".git")
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=ManifestSync", "GIT_AUTHOR_EMAIL=test@manifestsync.dev", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
		"GIT_COMMITTER_NAME=ManifestSync", "GIT_COMMITTER_EMAIL=test@manifestsync.dev", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z",
	}
	tree := filepath.Join(work, "tree")
	git := func(dir string, args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %v: %w\n%s", args, err, out)
		}
		return string(bytes.TrimSpace(out)), nil
	}
	if err := os.CopyFS(tree, os.DirFS(dir)); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{root, "init", "-q", "--bare", "-b", "main", bare},
		{tree, "init", "-q", "-b", "main"},
		{tree, "add", "-A"},
		{tree, "commit", "-q", "-m", "publish " + name},
		{tree, "push", "-q", bare, "main"},
	} {
		if _, err := git(args[0], args[1:]...); err != nil {
			return "", err
		}
	}
	return git(tree, "rev-parse", "HEAD")
}

// Blackhole accepts connections on 127.0.0.1 and never answers, as a git
// server that hangs does; it returns the port. The listener and every
// connection are closed when the test ends.
func Blackhole(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}
