package starlark

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	startime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Options configure an Interpreter.
type Options struct {
	// Predeclared are the globals of every script and every file it loads
	// (the engine passes the stdlib modules). New freezes them: they are
	// shared by concurrent evaluations.
	Predeclared starlark.StringDict

	// Limits bound every Load and Call; zero fields take their defaults.
	Limits Limits

	// Now is what time.now() returns, on every thread. The zero value
	// means the Unix epoch in UTC: scripts never see the real clock.
	Now time.Time

	// Print receives the output of the script's print(); nil discards it.
	Print func(thread *starlark.Thread, msg string)

	// FileName names a file of a source in positions and errors; nil means
	// "source/path". The CLI maps sources to the local paths they came
	// from, so that an error names a file the user can open.
	FileName func(source, path string) string
}

// fileOptions are the dialect scripts are written in. Recursion is allowed;
// Limits.MaxDepth and starlark-go's own stack guard bound it.
var fileOptions = syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
	Recursion:       true,
}

// Interpreter evaluates Starlark transforms in the sandbox. It is safe for
// concurrent use. It caches compiled programs keyed by the sha256 of their
// text and their file name (its predeclared names are fixed), so evaluating
// one script for many targets parses it once.
type Interpreter struct {
	predeclared starlark.StringDict
	limits      Limits
	now         time.Time
	print       func(thread *starlark.Thread, msg string)
	fileName    func(source, path string) string
	programs    *programCache
}

// New returns an Interpreter with the given options.
func New(opts Options) *Interpreter {
	in := &Interpreter{
		predeclared: opts.Predeclared,
		limits:      opts.Limits.WithDefaults(),
		fileName:    opts.FileName,
		now:         opts.Now,
		print:       opts.Print,
		programs:    newProgramCache(programCacheSize),
	}
	if in.predeclared == nil {
		in.predeclared = starlark.StringDict{}
	}
	in.predeclared.Freeze()
	if in.now.IsZero() {
		in.now = time.Unix(0, 0).UTC()
	}
	if in.print == nil {
		in.print = func(*starlark.Thread, string) {}
	}
	return in
}

// Limits returns the limits the Interpreter enforces, defaults filled in.
func (in *Interpreter) Limits() Limits { return in.limits }

// Module is a loaded, frozen script: its globals and the files it was made of.
// Its functions may be called concurrently.
type Module struct {
	Globals starlark.StringDict
	Files   []LoadedFile // the script and every file it loaded (transitively), in first-load order

	name    string  // the script's file name, for errors
	sites   Sites   // where its files build objects
	callers callers // its files by name, for built-ins that resolve paths
}

// LoadedFile is one file a Module was made of.
type LoadedFile struct {
	Source string
	Path   string
	Digest string // "sha256:<hex>" of the file's bytes
}

// Digest is "sha256:<hex>" over the (source, path, digest) of every loaded
// file, in order: the transform's digest, which changes when any file it
// loaded changes.
func (m *Module) Digest() string {
	h := sha256.New()
	for _, f := range m.Files {
		// Length-prefixed, so that no two lists of files hash alike.
		fmt.Fprintf(h, "%d:%s%d:%s%d:%s\n", len(f.Source), f.Source, len(f.Path), f.Path, len(f.Digest), f.Digest)
	}
	return fmt.Sprintf("sha256:%x", h.Sum(nil))
}

// Load compiles (cached) and executes the script's top level and every file
// it loads, each once, returning the frozen module. The step limit and the
// timeout apply to the whole Load.
func (in *Interpreter) Load(ctx context.Context, files Files, script Script) (*Module, error) {
	return in.load(ctx, files, script)
}

func (in *Interpreter) load(ctx context.Context, files Files, script Script) (_ *Module, err error) {
	defer recoverPanic(in.scriptName(script), &err)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load %s: %w", in.scriptName(script), err)
	}
	ld := &loader{in: in, files: files, done: make(map[fileKey]loadResult), byName: callers{}}
	r := in.start(ctx, "load "+in.scriptName(script))
	defer r.cancel() // on a panic, finish does not run
	r.thread.Load = ld.load
	r.thread.SetLocal(threadCallersKey, ld.byName)
	globals, err := ld.entry(r.thread, script)
	if err = r.finish(err); err != nil {
		return nil, err
	}
	return &Module{Globals: globals, Files: ld.loaded, name: in.scriptName(script), sites: ld.sites, callers: ld.byName}, nil
}

// Call calls the module's global function fn with args on a fresh thread
// under the limits: the step limit, and a timeout at the earlier of ctx's
// deadline and Limits.Timeout. Frozen modules may be called concurrently.
func (in *Interpreter) Call(ctx context.Context, m *Module, fn string, args ...starlark.Value) (starlark.Value, error) {
	if m == nil {
		return nil, fmt.Errorf("call %s: no module", fn)
	}
	return in.call(ctx, m, fn, args)
}

func (in *Interpreter) call(ctx context.Context, m *Module, fn string, args starlark.Tuple) (_ starlark.Value, err error) {
	defer recoverPanic(m.name, &err)
	v, ok := m.Globals[fn]
	if !ok {
		return nil, &Error{Pos: fileStart(m.name), Msg: fmt.Sprintf("no function %s is defined", fn)}
	}
	if _, ok := v.(starlark.Callable); !ok {
		return nil, &Error{Pos: fileStart(m.name), Msg: fmt.Sprintf("%s is a %s, want function", fn, v.Type())}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: call %s: %w", m.name, fn, err)
	}
	r := in.start(ctx, "call "+fn)
	defer r.cancel() // on a panic, finish does not run
	r.thread.SetLocal(threadCallersKey, m.callers)
	result, err := starlark.Call(r.thread, v, args, nil)
	if err = r.finish(err); err != nil {
		return nil, err
	}
	return result, nil
}

// recoverPanic turns a panic during an evaluation (a bug in a built-in) into
// an error, so that one bad evaluation cannot take the operator down. The Go
// stack goes into the backtrace for whoever debugs the built-in.
func recoverPanic(name string, err *error) {
	if p := recover(); p != nil {
		*err = &Error{
			Pos:       fileStart(name),
			Msg:       fmt.Sprintf("internal error: panic during evaluation: %v", p),
			Backtrace: string(debug.Stack()),
		}
	}
}

// fileStart is a position naming only a file, for errors about a whole script.
func fileStart(name string) syntax.Position {
	return syntax.MakePosition(&name, 0, 0)
}

// threadContextKey is the thread-local key of the evaluation's context.
const threadContextKey = "manifestsync.dev/context"

// ContextOf returns the context of the evaluation running on thread: built-ins
// that block or loop should stop when it is done (a timeout or cancellation).
// Values the engine put in the context of Load or Call are visible through it.
// It is context.Background() for threads this package did not start.
func ContextOf(thread *starlark.Thread) context.Context {
	if ctx, ok := thread.Local(threadContextKey).(context.Context); ok {
		return ctx
	}
	return context.Background()
}

// SetContext makes ctx the context of thread, for built-ins that read it
// with ContextOf; the Interpreter does so for the threads it runs, and
// tests and tools that run threads of their own may too.
func SetContext(ctx context.Context, thread *starlark.Thread) {
	thread.SetLocal(threadContextKey, ctx)
}

// stepCheckInterval is how often, in steps, a thread checks its call depth.
// Recursion costs at least two steps a level, so a runaway recursion ends
// within a few hundred frames of Limits.MaxDepth.
const stepCheckInterval = 1024

// run is one bounded evaluation on one thread.
type run struct {
	thread *starlark.Thread
	limits Limits
	parent context.Context // the caller's context
	ctx    context.Context // parent with Limits.Timeout; the thread's context
	cancel context.CancelFunc
	stop   func() bool   // stops the watcher that cancels the thread
	fired  chan struct{} // closed once the watcher has cancelled the thread

	// parentErr is the caller's context's error when the watcher fired: nil
	// means Limits.Timeout ended the evaluation. Written before fired is closed.
	parentErr error

	// hit is the limit that cancelled the thread from its own goroutine
	// (steps or depth); set and read only on the evaluating goroutine.
	hit string
	// hitPos is where the script was when hit was set, when it is known
	// better than the error's position; see position.
	hitPos syntax.Position
	// lastPos is the last position sampled inside lastFn's body, every
	// stepCheckInterval steps.
	lastPos syntax.Position
	lastFn  starlark.Callable
}

// start prepares a thread for one evaluation: locals, clock, print, and a
// watcher that cancels it when ctx is done or the timeout passes.
func (in *Interpreter) start(parent context.Context, name string) *run {
	ctx, cancel := context.WithTimeout(parent, in.limits.Timeout)
	r := &run{limits: in.limits, parent: parent, ctx: ctx, cancel: cancel, fired: make(chan struct{})}
	th := &starlark.Thread{Name: name, Print: in.print}
	SetContext(ctx, th)
	now := in.now
	startime.SetNow(th, func() (time.Time, error) { return now, nil })
	// The step limit is enforced in small slices so that the call depth is
	// checked on the way (starlark-go has no hook on calls).
	th.OnMaxSteps = r.onMaxSteps
	th.SetMaxExecutionSteps(min(stepCheckInterval, r.limits.MaxSteps))
	r.thread = th
	r.stop = context.AfterFunc(ctx, func() {
		r.parentErr = parent.Err()
		th.Cancel("evaluation cancelled")
		close(r.fired)
	})
	return r
}

// onMaxSteps runs every stepCheckInterval steps: it ends the evaluation at
// the step or depth limit, or grants the next slice of steps.
func (r *run) onMaxSteps(th *starlark.Thread) {
	if r.hit != "" {
		return
	}
	pos := r.position(th)
	switch {
	case th.Steps >= r.limits.MaxSteps:
		r.hit, r.hitPos = LimitSteps, pos
		th.Cancel("step limit exceeded")
	case th.CallStackDepth() > r.limits.MaxDepth:
		r.hit, r.hitPos = LimitDepth, pos
		th.Cancel("call depth limit exceeded")
	default:
		th.SetMaxExecutionSteps(min(th.Steps+stepCheckInterval, r.limits.MaxSteps))
	}
}

// position is the statement the innermost script function is running.
// starlark-go gives the instructions that close a loop (the jump back) no
// line of their own but the function's first line, so a limit that hits
// there would name the def line, not the loop: the last position sampled
// inside the same function's body is taken instead. Zero means the
// error's own position is as good as it gets.
func (r *run) position(th *starlark.Thread) syntax.Position {
	if th.CallStackDepth() == 0 {
		return syntax.Position{}
	}
	fr := th.DebugFrame(0)
	fn, ok := fr.Callable().(*starlark.Function)
	if !ok {
		return syntax.Position{}
	}
	pos := fr.Position()
	if pos.IsValid() && pos != fn.Position() {
		r.lastPos, r.lastFn = pos, fn
		return pos
	}
	if r.lastFn == fn {
		return r.lastPos
	}
	return syntax.Position{}
}

// finish releases the run's watcher and turns the evaluation's error into
// what the caller sees: a *LimitError when a limit ended it, the caller's
// cancellation wrapped, or a script *Error.
func (r *run) finish(err error) error {
	// Find out whether the context ended the evaluation, and why. A
	// built-in watching the context may return before the watcher has
	// run, so a done context counts even when the watcher did not fire.
	ended, parentErr := false, error(nil)
	if !r.stop() {
		<-r.fired
		ended, parentErr = true, r.parentErr
	} else if r.ctx.Err() != nil {
		ended, parentErr = true, r.parent.Err()
	}
	r.cancel()
	if err == nil {
		return nil
	}
	pos := errorPos(err)
	if r.hitPos.IsValid() {
		pos = r.hitPos
	}
	switch {
	case r.hit == LimitSteps:
		return &LimitError{Limit: LimitSteps, Value: strconv.FormatUint(r.limits.MaxSteps, 10), Pos: pos}
	case r.hit == LimitDepth:
		return &LimitError{Limit: LimitDepth, Value: strconv.Itoa(r.limits.MaxDepth), Pos: pos}
	case !ended:
		return scriptError(err)
	case parentErr == nil:
		return &LimitError{Limit: LimitTimeout, Value: r.limits.Timeout.String(), Pos: pos, Err: context.DeadlineExceeded}
	case errors.Is(parentErr, context.DeadlineExceeded):
		return &LimitError{Limit: LimitTimeout, Value: valueContextDeadline, Pos: pos, Err: parentErr}
	case pos.IsValid():
		return fmt.Errorf("%s: evaluation cancelled: %w", pos, parentErr)
	default:
		return fmt.Errorf("evaluation cancelled: %w", parentErr)
	}
}
