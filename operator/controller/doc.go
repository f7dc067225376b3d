// Package controller is the ManifestSync reconciler: it reads a
// ManifestSync's sources, evaluates it with the engine, applies every
// target's objects with server-side apply under the resource policies,
// prunes what is no longer desired, and reports what it did in status,
// events and metrics (DESIGN.md §2 and §5).
//
// A reconcile reads as: sources -> evaluate -> apply -> prune -> status.
// Everything the engine decides (what the objects are) stays in the engine;
// everything the API server decides (conflicts, ownership, defaults) is
// left to the API server.
//
// Targets go to this cluster or to remote ones (clusters.go): a client per
// kubeconfig Secret, cached and rebuilt when the Secret changes, with short
// request timeouts; a cluster that is unreachable or refuses its
// credentials fails only its own targets, which are retried with backoff.
// Remote objects are not watched for drift: they are checked at every
// resync (spec.interval, or any other trigger) instead. A deleted
// ManifestSync waits at most Options.DeletionTimeout for its objects to go.
// While this cluster's API server does not answer, an APIServerProbe
// (apiserver.go) says so (log, metric, readiness) and holds the caches'
// list and watch calls, so that the watches resume within seconds of its
// return instead of after client-go's backoff.
// With spec.serviceAccountName, every in-cluster read of a target object or
// object source, and every write, impersonates that account (tenancy.go).
//
// It is the only layer, with the git provider, that talks to a cluster;
// lang, stdlib and engine must never import it.
package controller
