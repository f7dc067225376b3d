// Package lean says whether this binary is the lean engine: cmd/engine
// built with the tag leanoperator, as the image ships it (/engine), beside
// cmd/engine-worker (/engine-worker). The lean engine links no evaluator
// it does not run in its own process: CUE, kustomize (its build and its
// strategic-merge patches) and Helm's template engine are left out, and
// everything that needs them (a transform, schemas and policies, builtin
// schemas included, a kustomize build, a chart, a strategic-merge patch)
// is evaluated in its worker processes, which run engine-worker, the
// evaluators without the operator.
//
// The packages that wrap those libraries (lang/cue, lang/kustomize, helm,
// stdlib's StrategicMerge) have a second, lean implementation of their API
// behind the tag, which refuses with ErrNotLinked; the operator routes
// every evaluation that would reach one to its workers
// (operator/controller's needsWorker), and the offline commands evaluate
// only in workers anyway. What is left to refuse are commands that run a
// language's own tooling in process, such as engine fmt of a .cue file.
// Starlark's interpreter stays linked (the engine package's evaluation
// context is written in its values; engine fmt formats .star files with
// the Starlark formatter) but runs no program in the lean engine: its
// initialisers allocate a few kilobytes.
package lean

import "errors"

// ErrNotLinked is returned by what the lean binary leaves out.
var ErrNotLinked = errors.New("not in this build of engine (the image's lean one, built with the tag leanoperator, which evaluates in engine-worker processes only): use a build of ./cmd/engine without the tag")
