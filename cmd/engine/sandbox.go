package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/manifestsync/manifestsync/engine/worker"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// The offline commands (eval, vet, test, diff) evaluate as the operator
// does: every evaluation of user code (transforms, kustomize builds, CUE
// schemas and policies, test files) runs in an evaluation worker
// (engine/worker), this executable's hidden eval-worker command, whose
// memory is bounded by --max-memory and whose wall-clock time by
// --timeout: one bound over load, compile, run and validate, CUE's
// compilation included, which no context can stop but a kill can. CI runs
// untrusted pull requests through them.

// defaultMaxMemory is --max-memory's default.
const defaultMaxMemory = "512Mi"

// minMaxMemory is the least --max-memory. The limit bounds the worker's
// whole resident size, and its runtime, the engine and the code of this
// binary take about 80 MiB of it before user code runs.
const minMaxMemory = 128 << 20

// killGrace is how long past --timeout a worker is killed: time for the
// limits inside an evaluation, which say where a script was, to end it
// first.
const killGrace = time.Second

// workerCommand starts an evaluation worker; nil is this executable with
// the argument eval-worker. Tests that run the CLI in their own process
// point it at the engine command testscript puts on $PATH.
var workerCommand []string

// addMaxMemoryFlag adds --max-memory; newSandbox parses it.
func addMaxMemoryFlag(fl *pflag.FlagSet, p *string) {
	*p = defaultMaxMemory
	fl.Var(quantityValue{p}, "max-memory", "memory limit of the worker process every evaluation runs in, at least 128Mi (1Gi, 2G)")
}

// quantityValue is a flag that holds a quantity as written (512Mi); it
// shows "quantity" as its type in help.
type quantityValue struct{ p *string }

func (v quantityValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v quantityValue) Set(s string) error { *v.p = s; return nil }
func (v quantityValue) Type() string       { return "quantity" }

// newSandbox returns the worker pool command evaluates in, one worker
// of maxMemory (a quantity) killed timeout after it starts anything (the
// Starlark limits' default when timeout is 0), and how to stop it. The
// worker starts at once, while the command reads its input.
func newSandbox(command, maxMemory string, timeout time.Duration) (*worker.Pool, func(), error) {
	pool, err := newSandboxPool(command, maxMemory, timeout, 0)
	if err != nil {
		return nil, nil, err
	}
	pool.Prestart()
	return pool, func() { _ = pool.Close() }, nil
}

// newSandboxPool is newSandbox's pool, its worker started at the first
// evaluation and stopped once idle for idle (0: kept until Close).
func newSandboxPool(command, maxMemory string, timeout, idle time.Duration) (*worker.Pool, error) {
	q, err := resource.ParseQuantity(maxMemory)
	if err != nil || q.Value() < minMaxMemory {
		return nil, usageErr("%s: --max-memory %q: want a quantity of at least 128Mi (512Mi, 1Gi)", command, maxMemory)
	}
	if timeout <= 0 {
		timeout = lstar.DefaultTimeout
	}
	pool, err := worker.New(worker.Options{
		Workers:     1,
		MemoryLimit: q.Value(),
		Timeout:     timeout,
		Grace:       killGrace,
		Command:     workerCommand,
		IdleTimeout: idle,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, err)
	}
	return pool, nil
}

// killed says whether err ended an evaluation with its worker: a limit
// (memory or time) or a crash. It then returns the error with exit status
// 2 (an evaluation that failed), naming what was evaluated (a file) and
// the flag that sets the limit.
func killed(what string, err error) (error, bool) {
	var k *worker.KilledError
	if !errors.As(err, &k) {
		return err, false
	}
	switch k.Limit {
	case worker.LimitMemory:
		err = fmt.Errorf("%s: %w (--max-memory)", what, err)
	case worker.LimitTimeout:
		err = fmt.Errorf("%s: %w (--timeout)", what, err)
	default:
		err = fmt.Errorf("%s: %w", what, err)
	}
	return &exitError{code: exitUsage, err: err}, true
}

// timedOut turns an evaluation error that the Starlark or CUE timeout
// inside the worker ended (before the worker's kill) into exit status 2,
// as the kill's, naming the flag; ok is false for any other error.
func timedOut(err error) (_ error, ok bool) {
	var le *lstar.LimitError
	if !errors.As(err, &le) || le.Limit != lstar.LimitTimeout {
		return err, false
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("%w (--timeout)", err)}, true
}
