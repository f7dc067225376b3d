package controller

import (
	"context"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
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

// evaluatorFor is where spec is evaluated: Options.Evaluator when spec
// runs code of the user's, else (and when there is no Evaluator) in
// process. An evaluation without user code only reads the inputs, applies
// the targets' static patches and checks the builtin schemas: the
// engine's own code over objects the operator holds already, which needs
// no sandbox, so a worker process is started only for a ManifestSync that
// needs one.
func (o Options) evaluatorFor(spec *v1alpha1.ManifestSyncSpec) Evaluator {
	if o.Evaluator == nil || !runsUserCode(spec) {
		return inProcess{}
	}
	return o.Evaluator
}

// runsUserCode reports whether evaluating spec runs a program the user
// wrote: a transform (Starlark or CUE), CUE schemas or policies read from
// a source, or a kustomize build (whose plugins and generators are
// programs of a kind too).
func runsUserCode(spec *v1alpha1.ManifestSyncSpec) bool {
	if spec.Transform != nil {
		return true
	}
	for _, s := range spec.Schemas {
		if s.Builtin == "" {
			return true
		}
	}
	for _, s := range spec.Sources {
		if s.Kustomize != nil {
			return true
		}
	}
	return false
}
