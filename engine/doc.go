// Package engine is the pure pipeline of ManifestSync: a ManifestSync spec and
// the snapshots of its sources go in, the objects of every target come out,
// with digests of every input and output and diagnostics.
//
// The engine takes data and returns data. It never talks to a cluster or a
// network, so `engine eval` runs offline and the operator and the CLI share
// one evaluation. It must not import client-go, controller-runtime or
// net/http; apimachinery types are fine.
package engine
