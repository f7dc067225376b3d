package soak

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// operatorProc is `engine operator` as a process of its own, in its own
// process group with its evaluation workers, restarted after a pause when
// it exits by itself, as a kubelet would (but after 1, 2, then 4 s, not
// the kubelet's 10 s to 5 min). Its output goes to one log file across
// restarts.
type operatorProc struct {
	bin, kubeconfig, logPath string
	env                      []string
	args                     []string // beyond the kubeconfig's and those that bind no port

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	killed    bool // the test stopped or killed the running process
	stopped   bool // for good
	starts    int
	startedAt []time.Time // when each start was made
	selfExits []string    // how it exited by itself
	crashes   int         // exits of its own in a row
}

func (o *operatorProc) start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.startLocked()
}

func (o *operatorProc) startLocked() error {
	if o.stopped || o.running() {
		// Two overlapping kill -9 faults both restart it: one process
		// runs, never two (two operators without leader election would
		// fight over every object).
		return nil
	}
	log, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	o.starts++
	o.startedAt = append(o.startedAt, time.Now())
	cmd := exec.Command(o.bin, append([]string{"operator", "--kubeconfig", o.kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, o.args...)...)
	cmd.Env = o.env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting engine operator: %w", err)
	}
	exited := make(chan struct{})
	o.cmd, o.exited, o.killed = cmd, exited, false
	started := time.Now()
	go func() {
		err := cmd.Wait()
		log.Close()
		close(exited)
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.killed || o.stopped || o.cmd != cmd {
			return
		}
		o.selfExits = append(o.selfExits, fmt.Sprintf("%v", err))
		if time.Since(started) > 30*time.Second {
			o.crashes = 0
		}
		o.crashes++
		pause := time.Duration(1<<min(o.crashes-1, 2)) * time.Second
		go func() {
			time.Sleep(pause)
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.cmd == cmd && !o.stopped {
				_ = o.startLocked()
			}
		}()
	}()
	return nil
}

// running reports whether the process last started has not exited yet.
// The caller holds o.mu.
func (o *operatorProc) running() bool {
	if o.cmd == nil {
		return false
	}
	select {
	case <-o.exited:
		return false
	default:
		return true
	}
}

// kill9 kills the operator and its workers with SIGKILL and waits until
// the operator has exited.
func (o *operatorProc) kill9() error {
	o.mu.Lock()
	cmd, exited := o.cmd, o.exited
	o.killed, o.crashes = true, 0
	o.mu.Unlock()
	if cmd == nil {
		return errors.New("no operator runs")
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	if errors.Is(err, syscall.ESRCH) {
		return nil // it had exited by itself
	}
	return err
}

// stop stops the operator for good: SIGTERM, then SIGKILL after 10 s.
func (o *operatorProc) stop() {
	o.mu.Lock()
	o.stopped, o.killed = true, true
	cmd, exited := o.cmd, o.exited
	o.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// gitServer is a git daemon on a fixed port of 127.0.0.1 that the test
// stops (kill -9) and starts again, serving one repository it commits to.
type gitServer struct {
	root, bare, tree string
	port             int
	env              []string

	mu     sync.Mutex // serialises commits
	proc   sync.Mutex // guards cmd
	cmd    *exec.Cmd
	exited chan struct{}
	out    gittest.Buffer
	n      int
}

func newGitServer(t *testing.T) (*gitServer, error) {
	g := &gitServer{root: t.TempDir(), tree: t.TempDir(), port: gittest.FreePort(t), env: gittest.ServerEnv(t)}
	g.bare = filepath.Join(g.root, "config.git")
	g.env = append(g.env, "GIT_AUTHOR_NAME=soak", "GIT_AUTHOR_EMAIL=soak@manifestsync.dev",
		"GIT_COMMITTER_NAME=soak", "GIT_COMMITTER_EMAIL=soak@manifestsync.dev")
	if _, err := g.git(g.root, "init", "-q", "--bare", "-b", "main", g.bare); err != nil {
		return nil, err
	}
	if _, err := g.git(g.tree, "init", "-q", "-b", "main"); err != nil {
		return nil, err
	}
	if err := g.start(); err != nil {
		return nil, err
	}
	t.Cleanup(g.stop)
	return g, nil
}

func (g *gitServer) url() string { return fmt.Sprintf("git://127.0.0.1:%d/config.git", g.port) }

func (g *gitServer) git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, g.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %v: %w\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// start runs the daemon and waits until it accepts connections.
func (g *gitServer) start() error {
	g.proc.Lock()
	defer g.proc.Unlock()
	cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
		"--base-path="+g.root, "--listen=127.0.0.1", "--port="+strconv.Itoa(g.port))
	cmd.Env = g.env
	cmd.Stdout, cmd.Stderr = &g.out, &g.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	g.cmd, g.exited = cmd, exited
	if err := gittest.WaitListening(g.port, exited, 10*time.Second); err != nil {
		return fmt.Errorf("git daemon: %w\n%s", err, g.out.String())
	}
	return nil
}

// stop kills the daemon and the processes it serves with.
func (g *gitServer) stop() {
	g.proc.Lock()
	defer g.proc.Unlock()
	if g.cmd == nil {
		return
	}
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.exited
	g.cmd = nil
}

// commit makes the work tree hold exactly files, commits and pushes
// them to main (a file operation: it works while the daemon is down).
func (g *gitServer) commit(files map[string]string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	entries, err := os.ReadDir(g.tree)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			if err := os.RemoveAll(filepath.Join(g.tree, e.Name())); err != nil {
				return err
			}
		}
	}
	for name, content := range files {
		path := filepath.Join(g.tree, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	g.n++
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "-q", "--allow-empty", "-m", fmt.Sprintf("commit %d", g.n)},
		{"push", "-q", g.bare, "main"},
	} {
		if _, err := g.git(g.tree, args...); err != nil {
			return err
		}
	}
	return nil
}

// signal sends sig to the operator's process group (it and its
// evaluation workers, as a frozen or resumed pod would be).
func (o *operatorProc) signal(sig syscall.Signal) error {
	o.mu.Lock()
	cmd := o.cmd
	o.mu.Unlock()
	if cmd == nil {
		return errors.New("no operator runs")
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// term stops the operator with SIGTERM, as a kubelet does before a
// restart, waits until it has exited (SIGKILL after 20 s), and leaves it
// stopped until start.
func (o *operatorProc) term() error {
	o.mu.Lock()
	cmd, exited := o.cmd, o.exited
	o.killed, o.crashes = true, 0
	o.mu.Unlock()
	if cmd == nil {
		return errors.New("no operator runs")
	}
	err := cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return nil
	case <-time.After(20 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return errors.Join(err, errors.New("still running 20 s after SIGTERM: killed"))
}

// isRunning reports whether the process last started runs (a paused one
// does).
func (o *operatorProc) isRunning() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.running()
}
