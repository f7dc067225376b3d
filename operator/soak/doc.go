// Package soak is the operator's fault suite: `engine operator`, run as a
// process of its own against a real control plane and a remote cluster,
// syncs 50 ManifestSyncs (object sources with a Starlark transform,
// ConfigMaps passed through, git sources, Secrets copied into the
// namespaces a selector picks) while a seeded, randomised schedule of
// faults runs: kill -9 of the operator, the API server stopped (SIGTERM)
// or killed (SIGKILL) for 20 s (20-60 s in long runs), the remote
// cluster and the git server down (refusing connections) or blackholed
// (accepting them and never answering), hand edits and deletions of
// managed objects, source churn, source values the transform rejects and
// webhook floods (400 unauthenticated posts of 5 MiB, then a signed
// push). Each phase of faults ends with the API server's outage and,
// once every fault is over, a few changes the operator must notice. The
// operator runs with RBAC that grants everything but Pods, and beside the
// fleet six ManifestSyncs can never sync: two output a Pod, two read a
// git server that never answers, two target a cluster that never
// answers.
//
// Invariants are checked continuously (watches, the operator's log) and
// after each phase of faults: no managed object lost or duplicated, no
// foreign object modified, no Secret value in a log, event or status,
// every ManifestSync converged within the limit after the last fault, no
// write war, every ManifestSync that can never sync reporting why. The
// test prints a table of the faults injected and the invariants held.
//
// SOAK_DURATION sets how long faults run (default 60s, the form `make
// test` runs; `make soak` runs 15m), SOAK_SEED replays a run's schedule,
// SOAK_CONVERGE_WITHIN overrides the convergence limit (10s, or 60s for
// runs shorter than 5 minutes) and SOAK_REPORT names a file the table is
// written to.
//
// TestSoakShards (shards_test.go) is the sharded fault soak of issue 29:
// three replicas of `engine operator --shards auto`, each its own user of
// a control plane of the test's own with an audit log, sync the fleet
// (without its remote targets) while its sources change and replicas are
// killed (kill -9, restarted with their ID or a new one), paused
// (SIGSTOP past the Lease, then SIGCONT) and stopped (SIGTERM) and
// restarted. TestSoak's invariants hold, and from the audit log: every
// write is made by the replica its ManifestSync is labelled to at that
// moment, none past the writer's fence (a paused replica writes nothing,
// its Lease included, until its restarted process renews it), no
// ManifestSync moves but after its owner let go of it (by the sharder's
// handover gap) or past the owner's fence, no object is written by two
// replicas within a second; at the end every ManifestSync is owned by a
// live replica, Ready, at its last revision. Without SOAK_DURATION its
// faults run 40 s (one kill -9, one pause, one SIGTERM); `make soak`
// runs it after TestSoak, for as long, and writes its table beside
// TestSoak's (soak-report-shards.md).
//
// It has no code besides its tests, and nothing may import it.
package soak
