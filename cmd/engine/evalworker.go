package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/manifestsync/manifestsync/engine/worker"
	helmrender "github.com/manifestsync/manifestsync/helm"
	"github.com/manifestsync/manifestsync/internal/lean"
	"github.com/manifestsync/manifestsync/operator/controller"
)

// newEvalWorkerCmd is the hidden command the operator and the offline
// commands (eval, vet, test, diff) start their evaluation workers with
// (engine/worker): it speaks the worker protocol on stdin and stdout until
// stdin closes.
func newEvalWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "eval-worker",
		Short:  "Evaluate for the operator and the offline commands in a memory-limited process (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if lean.Operator {
				return failed(fmt.Errorf("eval-worker: %w", lean.ErrNotLinked))
			}
			if err := worker.ServeStdioWith(worker.ServeOptions{Helm: helmrender.Renderer{}, Stuck: helmrender.Stuck}); err != nil {
				return failed(err)
			}
			return nil
		},
	}
}

// evalWorkerFlags choose where the operator evaluates.
type evalWorkerFlags struct {
	inProcess   bool
	workers     int
	memoryLimit string
	opts        worker.Options
}

func addEvalWorkerFlags(fl interface {
	IntVar(p *int, name string, value int, usage string)
	StringVar(p *string, name string, value string, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}, f *evalWorkerFlags) {
	fl.IntVar(&f.workers, "eval-workers", worker.DefaultWorkers, "evaluations of user code (transforms, schemas from a source, kustomize) and of git sources run at once, each in a worker process of its own")
	fl.StringVar(&f.memoryLimit, "eval-memory-limit", "256Mi", "memory limit of each evaluation worker (a quantity: 512Mi, 1Gi)")
	fl.DurationVar(&f.opts.Timeout, "eval-timeout", worker.DefaultTimeout, "wall-clock limit of one evaluation in a worker")
	fl.BoolVar(&f.inProcess, "eval-in-process", false, "evaluate in the operator's process: no worker processes, and no memory limit")
	fl.DurationVar(&f.opts.IdleTimeout, "eval-idle-timeout", defaultEvalIdle, "stop an evaluation worker no evaluation has used for this long (0: keep them); the next evaluation starts one again")
}

// defaultEvalIdle is --eval-idle-timeout's default: a worker left idle
// that long costs its memory for nothing, and one started again costs a
// fraction of a second.
const defaultEvalIdle = 10 * time.Minute

// evalSpawnDelay is how long an evaluation waits for the busy worker
// before the operator starts another: most evaluations take milliseconds,
// and a worker costs tens of MiB.
const evalSpawnDelay = 100 * time.Millisecond

// budget is how much memory the evaluation workers may use together, in
// bytes: 0 with --eval-in-process or a limit that does not parse (which
// evaluator refuses).
func (f *evalWorkerFlags) budget() int64 {
	q, err := resource.ParseQuantity(f.memoryLimit)
	if f.inProcess || err != nil {
		return 0
	}
	return int64(max(f.workers, 0)) * q.Value()
}

// evaluator returns the pool of workers the flags ask for (nil with
// --eval-in-process: the reconciler then evaluates in process) and how
// to stop it.
func (f *evalWorkerFlags) evaluator() (controller.Evaluator, func(), error) {
	if f.inProcess {
		if lean.Operator {
			return nil, nil, usageErr("operator: --eval-in-process: %v", lean.ErrNotLinked)
		}
		return nil, func() {}, nil
	}
	if f.workers < 1 {
		return nil, nil, usageErr("operator: --eval-workers must be at least 1")
	}
	if f.opts.IdleTimeout < 0 {
		return nil, nil, usageErr("operator: --eval-idle-timeout %v: want 0 (keep the workers) or more", f.opts.IdleTimeout)
	}
	q, err := resource.ParseQuantity(f.memoryLimit)
	if err != nil || q.Value() < 32<<20 {
		return nil, nil, usageErr("operator: --eval-memory-limit %q: want a quantity of at least 32Mi", f.memoryLimit)
	}
	opts := f.opts
	opts.Workers, opts.MemoryLimit = f.workers, q.Value()
	if opts.SpawnDelay == 0 {
		opts.SpawnDelay = evalSpawnDelay
	}
	pool, err := worker.New(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("operator: %w", err)
	}
	return pool, func() { _ = pool.Close() }, nil
}
