// Package soak is the operator's fault suite: `engine operator`, run as a
// process of its own against a real control plane and a remote cluster,
// syncs 50 ManifestSyncs (object sources with a Starlark transform,
// ConfigMaps passed through, git sources, Secrets copied into the
// namespaces a selector picks) while a seeded, randomised schedule of
// faults runs: kill -9 of the operator, the API server stopped (SIGTERM)
// or killed (SIGKILL) for 20 s (20-60 s in long runs), the remote
// cluster down, the git server down, hand edits and deletions of managed
// objects, source churn and source values the transform rejects. Each phase of faults ends with the
// API server's outage and, once every fault is over, a few changes the
// operator must notice.
//
// Invariants are checked continuously (watches, the operator's log) and
// after each phase of faults: no managed object lost or duplicated, no
// foreign object modified, no Secret value in a log, event or status,
// every ManifestSync converged within the limit after the last fault, no
// write war. The test prints a table of the faults injected and the
// invariants held.
//
// SOAK_DURATION sets how long faults run (default 60s, the form `make
// test` runs; `make soak` runs 15m), SOAK_SEED replays a run's schedule,
// SOAK_CONVERGE_WITHIN overrides the convergence limit (10s, or 60s for
// runs shorter than 5 minutes) and SOAK_REPORT names a file the table is
// written to.
//
// It has no code besides its tests, and nothing may import it.
package soak
