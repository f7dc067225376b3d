package controller

import (
	"context"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/lean"
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
// needs a worker (needsWorker), else (and when there is no Evaluator) in
// process. An evaluation that needs none only reads objects the operator
// holds already (object sources), applies the targets' static patches
// and checks the builtin schemas: the engine's own code over inputs
// already in memory, which needs no sandbox, so a worker process is
// started only for a ManifestSync that needs one.
func (o Options) evaluatorFor(spec *v1alpha1.ManifestSyncSpec) Evaluator {
	if o.Evaluator == nil || !needsWorker(spec) {
		return inProcess{}
	}
	return o.Evaluator
}

// needsWorker reports whether evaluating spec must run under the
// worker's memory limit: it runs a program the user wrote (a transform,
// Starlark or CUE; CUE schemas or policies read from a source; a
// kustomize build, whose plugins and generators are programs of a kind
// too; a chart's templates, which may loop without end), or it parses
// files of a git source. In the lean engine (internal/lean), which links
// neither CUE nor kustomize, builtin schemas are checked and
// strategic-merge patches applied in a worker too; in both, patches of
// more than patchBytesInProcess are parsed there. Parsing is bounded
// by no byte limit: YAML takes 12 times its size in memory for ordinary manifests
// and 100 times for dense flow maps (an 8 MiB file, the largest a git
// source may hold, 819 MiB), so a file that passes through (no transform,
// no kustomize) is parsed in a worker too. That costs nothing in the
// steady state: a reconcile that finds the same spec, revisions and
// namespaces reuses the last evaluation (Reconciler.evaluate).
func needsWorker(spec *v1alpha1.ManifestSyncSpec) bool {
	return needsWorkerIn(spec, lean.Operator)
}

// needsWorkerIn is needsWorker in the lean engine or in the full one.
func needsWorkerIn(spec *v1alpha1.ManifestSyncSpec, leanEngine bool) bool {
	if spec.Transform != nil {
		return true
	}
	for _, s := range spec.Schemas {
		if s.Builtin == "" || leanEngine {
			return true
		}
	}
	for _, s := range spec.Sources {
		if s.Kustomize != nil || s.Git != nil || s.Helm != nil {
			return true
		}
	}
	size := 0
	for _, t := range spec.Targets {
		for _, p := range t.Patches {
			size += len(p.Patch)
			if leanEngine && engine.MayBeStrategicMerge(p.Patch) {
				return true
			}
		}
	}
	return size > patchBytesInProcess
}

// patchBytesInProcess bounds the patches an evaluation applies in the
// operator's own process: YAML takes up to 100 times its size once parsed
// (dense flow maps), so a spec whose targets' patches are larger goes to
// a worker, under its memory limit. Ordinary patches are far smaller.
const patchBytesInProcess = 64 << 10
