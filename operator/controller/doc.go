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
// It is the only layer, with the git provider, that talks to a cluster;
// lang, stdlib and engine must never import it.
package controller
