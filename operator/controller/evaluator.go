package controller

import (
	"context"

	"github.com/manifestsync/manifestsync/engine"
)

// Evaluator runs the engine over a ManifestSync's spec and snapshots:
// engine.Evaluate itself, or a pool of worker processes with a memory
// limit (engine/worker) that stops a runaway script without taking the
// operator down.
type Evaluator interface {
	Evaluate(ctx context.Context, spec engine.Spec, opts engine.Options) (*engine.Result, error)
}

// inProcess evaluates in the operator's own process: scripts are bounded
// in steps, time and output, but not in memory.
type inProcess struct{}

func (inProcess) Evaluate(ctx context.Context, spec engine.Spec, opts engine.Options) (*engine.Result, error) {
	return engine.Evaluate(ctx, spec, opts)
}

func (o Options) evaluator() Evaluator {
	if o.Evaluator != nil {
		return o.Evaluator
	}
	return inProcess{}
}
