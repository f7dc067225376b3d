package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/lean"
)

// Defaults of Options.
const (
	DefaultWorkers     = 2
	DefaultMemoryLimit = 256 << 20
	DefaultTimeout     = time.Minute
)

// watchInterval is how often the parent reads a busy worker's resident size.
const watchInterval = 50 * time.Millisecond

// Options configure a Pool. The zero value is usable: two workers of
// 256 MiB each, a minute per evaluation, running this executable's
// eval-worker subcommand.
type Options struct {
	// Workers is how many evaluations run at once, each in its own
	// process; default 2.
	Workers int
	// MemoryLimit bounds each worker's memory, in bytes; default 256 MiB.
	MemoryLimit int64
	// Timeout bounds the wall-clock time of one evaluation, as a backstop
	// to the script limits (which bound each Starlark call); default 1m.
	Timeout time.Duration
	// Grace is how long past Timeout a worker is killed: time for the
	// limits inside an evaluation, which say where a script was, to end
	// it first. A kill still names Timeout. Default 0.
	Grace time.Duration
	// Command starts a worker: a program that calls Serve on its stdin and
	// stdout. Default: the program $MANIFESTSYNC_EVAL_WORKER names (the
	// image's /engine-worker), else this executable with the argument
	// "eval-worker", or, in the lean engine (internal/lean), the
	// engine-worker beside this executable.
	Command []string
	// Env is added to the worker's environment (which is the parent's).
	Env []string
	// IdleTimeout, when positive, stops a worker no evaluation has used
	// for that long; the next evaluation starts one again. Zero keeps
	// workers until Close.
	IdleTimeout time.Duration
	// SpawnDelay, when positive, is how long an evaluation that finds
	// every running worker busy waits for one to finish before it starts
	// another: a process costs tens of MiB and its start, and a short
	// evaluation ends sooner. Zero starts one at once.
	SpawnDelay time.Duration

	// from says where a default Command came from, for the error when it
	// does not start.
	from string
}

// CommandEnv names the environment variable that, when set, is the
// program a pool starts its workers with (Options.Command's default): a
// build of cmd/engine-worker, which links the evaluators and nothing of
// the operator, so that each worker maps a smaller executable than
// bin/engine. It must be of the same build as the program that starts
// it (the image ships both, and sets it).
const CommandEnv = "MANIFESTSYNC_EVAL_WORKER"

// WorkerBinary is the file name of cmd/engine-worker's build, which the
// lean engine looks for beside itself.
const WorkerBinary = "engine-worker"

func (o Options) withDefaults() (Options, error) {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if len(o.Command) == 0 {
		if c := os.Getenv(CommandEnv); c != "" {
			o.Command, o.from = []string{c}, CommandEnv
			return o, nil
		}
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("eval workers: finding this executable: %w", err)
		}
		if lean.Operator {
			// The lean engine has no evaluators to serve with: its
			// workers are the engine-worker beside it.
			o.Command, o.from = []string{filepath.Join(filepath.Dir(exe), WorkerBinary)}, "the lean engine evaluates in the "+WorkerBinary+" beside it"
			return o, nil
		}
		o.Command = []string{exe, "eval-worker"}
	}
	return o, nil
}

// Pool evaluates in worker processes, at most Options.Workers at once,
// starting workers when needed and replacing those that die. An
// evaluation takes the idle worker used last, and starts a new one only
// when every running worker is busy, so that a pool whose evaluations
// rarely overlap runs one process, not Options.Workers; with
// Options.IdleTimeout the others stop once unused for that long. It is
// safe for concurrent use.
type Pool struct {
	opts Options
	busy chan struct{} // a token per evaluation under way: Options.Workers at most

	mu     sync.Mutex
	idle   []*process    // running and not busy, the one used last at the end
	freed  chan struct{} // closed (and replaced) when a worker turns idle
	live   map[*process]bool
	closed bool
	done   chan struct{} // closed by Close: stops the reaper
}

// New returns a pool; its workers start with the first evaluations.
func New(opts Options) (*Pool, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{opts: opts, busy: make(chan struct{}, opts.Workers), live: map[*process]bool{}, done: make(chan struct{}), freed: make(chan struct{})}
	if opts.IdleTimeout > 0 {
		go p.reapIdle()
	}
	return p, nil
}

// acquire waits for a token and returns the idle worker used last, or
// nil when none is idle (the caller starts one). When every running
// worker is busy it waits up to Options.SpawnDelay for one to turn idle.
func (p *Pool) acquire(ctx context.Context) (*process, error) {
	select {
	case p.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, &KilledError{Err: ctx.Err()}
	}
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			w := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			return w, nil
		}
		freed, running := p.freed, len(p.live)
		p.mu.Unlock()
		if p.opts.SpawnDelay <= 0 || running == 0 {
			return nil, nil
		}
		if deadline == nil {
			t := time.NewTimer(p.opts.SpawnDelay)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-freed:
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			<-p.busy
			return nil, &KilledError{Err: ctx.Err()}
		}
	}
}

// release gives back the token, and w (when not nil) to the idle ones.
func (p *Pool) release(w *process) {
	if w != nil {
		w.idleSince = time.Now()
		p.mu.Lock()
		if p.closed {
			w.kill()
		} else {
			p.idle = append(p.idle, w)
			close(p.freed)
			p.freed = make(chan struct{})
		}
		p.mu.Unlock()
	}
	<-p.busy
}

// reapIdle stops, every quarter of Options.IdleTimeout, the workers idle
// for longer than it, until Close.
func (p *Pool) reapIdle() {
	tick := time.NewTicker(p.opts.IdleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case now := <-tick.C:
			p.reap(now)
		}
	}
}

// reap stops the workers idle since before now-Options.IdleTimeout.
func (p *Pool) reap(now time.Time) {
	p.mu.Lock()
	var stale []*process
	kept := p.idle[:0]
	for _, w := range p.idle {
		if now.Sub(w.idleSince) >= p.opts.IdleTimeout {
			stale = append(stale, w)
			delete(p.live, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.mu.Unlock()
	for _, w := range stale {
		w.stop()
	}
}

// Evaluate is engine.Evaluate in a worker. Besides the engine's errors it
// returns a *KilledError when the worker had to be killed (memory limit,
// timeout, ctx done) or crashed; the pool then replaces the worker.
func (p *Pool) Evaluate(ctx context.Context, spec engine.Spec, opts engine.Options) (*engine.Result, error) {
	var (
		res     *engine.Result
		evalErr error
	)
	err := p.run(ctx, message{Eval: toWireRequest(spec, opts)}, func(w *process, m message) (bool, error) {
		switch {
		case m.Scope != nil:
			a := &scopeMessage{}
			if opts.Scope != nil {
				a.Namespaced, a.OK = opts.Scope(gvkOf(m.Scope))
			}
			return false, writeFrame(w.in, message{Scope: a})
		case m.Result != nil:
			res, evalErr = fromWireResponse(m.Result)
			w.retire = m.Result.Retire
			return true, nil
		}
		return false, errUnexpected
	})
	if err != nil {
		// A crash's last words come from the worker's stderr, which no
		// redactor saw: they may quote the values of the sources.
		return nil, engine.SnapshotRedactor(spec.Snapshots).Error(err)
	}
	return res, evalErr
}

// run sends req to a worker and passes every message the worker sends
// back to handle, until handle says the conversation is done; an error
// of handle ends the conversation and the worker. The error is a
// *KilledError when the worker had to be killed or died.
func (p *Pool) run(ctx context.Context, req message, handle func(*process, message) (done bool, err error)) error {
	if p.isClosed() {
		return errPoolClosed
	}
	w, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	if w == nil {
		if w, err = p.start(ctx); err != nil {
			p.release(nil)
			return err
		}
	}
	limit := max(int(p.opts.MemoryLimit), 64<<20)
	_, err = p.supervise(ctx, w, func() (any, error) {
		if err := writeFrame(w.in, req); err != nil {
			return nil, err
		}
		for {
			var m message
			if err := readFrame(w.out, limit, &m); err != nil {
				return nil, err
			}
			if done, err := handle(w, m); err != nil || done {
				return nil, err
			}
		}
	})
	var killed *KilledError
	switch {
	case errors.As(err, &killed):
		p.forget(w)
		w = nil
	case w.retire: // it exits after this answer; make sure it does
		w.kill()
		<-w.exited
		p.forget(w)
		w = nil
	}
	p.release(w)
	return err
}

var errUnexpected = errors.New("eval worker: unexpected message")

// Prestart starts a worker in the background, if none is running, so
// that the next evaluation need not wait for it; a failure to start is
// left for that evaluation to find.
func (p *Pool) Prestart() {
	go func() {
		p.mu.Lock()
		running := len(p.live) > 0
		p.mu.Unlock()
		if running {
			return
		}
		w, err := p.acquire(context.Background())
		if err != nil {
			return
		}
		if w == nil {
			w, _ = p.start(context.Background())
		}
		p.release(w)
	}()
}

// Running is how many worker processes run, busy or idle.
func (p *Pool) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

// Close stops every worker; evaluations under way fail.
func (p *Pool) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	live := make([]*process, 0, len(p.live))
	for w := range p.live {
		live = append(live, w)
	}
	p.idle = nil
	p.mu.Unlock()
	for _, w := range live {
		w.stop()
	}
	return nil
}

var errPoolClosed = errors.New("eval workers: the pool is closed")

func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Pool) forget(w *process) {
	p.mu.Lock()
	delete(p.live, w)
	p.mu.Unlock()
}

// start starts a worker and waits until it has bounded itself.
func (p *Pool) start(ctx context.Context) (*process, error) {
	if p.isClosed() {
		return nil, errPoolClosed
	}
	w, err := startProcess(p.opts)
	if err != nil {
		return nil, p.startFailed(err)
	}
	p.mu.Lock()
	p.live[w] = true
	p.mu.Unlock()
	_, err = p.supervise(ctx, w, func() (any, error) {
		if err := writeFrame(w.in, message{Config: &config{MemoryLimit: p.opts.MemoryLimit}}); err != nil {
			return nil, err
		}
		var m message
		if err := readFrame(w.out, maxFrame, &m); err != nil {
			return nil, err
		}
		if m.Ready == nil {
			return nil, errors.New("eval worker: expected ready")
		}
		return nil, nil
	})
	if err != nil {
		p.forget(w)
		return nil, p.startFailed(fmt.Errorf("starting an eval worker: %w", err))
	}
	return w, nil
}

// startFailed says, of a worker that did not start, where its default
// command came from (Options.from), if it did.
func (p *Pool) startFailed(err error) error {
	if p.opts.from == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, p.opts.from)
}

// supervise runs exchange, a conversation with w, and kills w when the
// conversation fails, ctx is done, the timeout passes or w's resident
// size goes past the memory limit; the error is then a *KilledError.
func (p *Pool) supervise(ctx context.Context, w *process, exchange func() (any, error)) (any, error) {
	type outcome struct {
		v   any
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		v, err := exchange()
		done <- outcome{v, err}
	}()
	timeout := time.NewTimer(p.opts.Timeout + p.opts.Grace)
	defer timeout.Stop()
	watch := time.NewTicker(watchInterval)
	defer watch.Stop()
	stop := func(why *KilledError) (any, error) {
		w.kill()
		<-done
		<-w.exited
		return nil, why
	}
	for {
		select {
		case o := <-done:
			if o.err == nil {
				return o.v, nil
			}
			// The worker died, or said something it should not have.
			killed := false
			select {
			case <-w.exited:
			case <-time.After(time.Second):
				w.kill()
				<-w.exited
				killed = true
			}
			return nil, w.deathError(o.err, p.opts.MemoryLimit, killed)
		case <-ctx.Done():
			return stop(&KilledError{Err: ctx.Err()})
		case <-timeout.C:
			return stop(&KilledError{Limit: LimitTimeout, Value: p.opts.Timeout.String()})
		case <-watch.C:
			if rss, err := residentSize(w.pid); err == nil && rss > uint64(p.opts.MemoryLimit) {
				return stop(&KilledError{Limit: LimitMemory, Value: formatBytes(p.opts.MemoryLimit)})
			}
		}
	}
}

// process is one running worker.
type process struct {
	cmd    *exec.Cmd
	pid    int
	stdin  *os.File
	in     *bufio.Writer
	out    *bufio.Reader
	stdout *os.File
	stderr *tailBuffer
	exited chan struct{} // closed once the process is reaped
	err    error         // what Wait returned; read after exited
	// retire is set when the worker said it exits after its answer.
	retire bool
	// idleSince is when its last evaluation ended (Pool.idle).
	idleSince time.Time
}

func startProcess(opts Options) (*process, error) {
	cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
	cmd.Env = append(os.Environ(), opts.Env...)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	w := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: &tailBuffer{max: 64 << 10}, exited: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, w.stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting an eval worker: %w", err)
	}
	w.pid = cmd.Process.Pid
	w.in = bufio.NewWriterSize(inW, 1<<16)
	w.out = bufio.NewReaderSize(outR, 1<<16)
	go func() {
		w.err = cmd.Wait()
		inW.Close()
		outR.Close()
		close(w.exited)
	}()
	return w, nil
}

// kill kills the worker; it is reaped in the background.
func (w *process) kill() { _ = w.cmd.Process.Kill() }

// stop kills the worker and waits until it is reaped.
func (w *process) stop() {
	w.kill()
	<-w.exited
}

// deathError says why the conversation with a worker failed with err;
// killed says the parent killed it after. The Go runtime of a worker that
// reached its address-space limit says it ran out of memory.
func (w *process) deathError(err error, limit int64, killed bool) error {
	var big *frameTooLargeError
	if errors.As(err, &big) {
		return &KilledError{Limit: LimitMemory, Value: formatBytes(limit), Detail: "its result is too large: " + big.Error()}
	}
	last := w.stderr.String()
	if outOfMemory(last) {
		return &KilledError{Limit: LimitMemory, Value: formatBytes(limit)}
	}
	detail := firstFatalLine(last)
	switch {
	case detail != "":
	case killed:
		detail = err.Error()
	case w.err != nil:
		detail = w.err.Error()
		if strings.HasSuffix(detail, "signal: killed") {
			detail += " (by the kernel's out-of-memory killer?)"
		}
	default:
		detail = err.Error()
	}
	return &KilledError{Detail: detail}
}

// outOfMemory tells the Go runtime's last words when an allocation, or a
// thread stack, did not fit under RLIMIT_AS.
func outOfMemory(stderr string) bool {
	for _, s := range []string{"out of memory", "cannot allocate memory", "failed to create new OS thread", "pthread_create failed", "cannot map pages", "address space"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

// firstFatalLine picks the line of a crash report that says what happened.
func firstFatalLine(stderr string) string {
	var last string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "fatal error:") || strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "eval worker:") {
			return l
		}
		if l != "" && last == "" {
			last = l
		}
	}
	return last
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
