// Package applier writes a ManifestSync's objects to a cluster with
// server-side apply, as the reconciler, `engine diff` and the web UI all
// need it, in files by verb as fluxcd/pkg's ssa keeps them:
//   - apply.go: the apply of one object under the resource policies (Sync,
//     Keep, Adopt, Overwrite) with the owner label, digest annotation and
//     field manager of names.go (Manager.Apply), and what it did (Change,
//     Action: the entries of a sync's change set);
//   - dryrun.go: the same apply as a server-side dry run, compared with
//     the live objects, prunes included (DryRun: what a sync would do,
//     object by object);
//   - delete.go: pruning and orphaning an object of ours (Delete, Orphan);
//   - gate.go: the write gate's rules of what a gated ManifestSync may
//     write (Gate, GatedClient);
//   - secretdata.go: a Secret's stringData merged into data before it is
//     sent (AsApplied);
//   - remote.go and namespaces.go: the client of a target's remote
//     cluster built from its kubeconfig Secret (RemoteClientAs), and the
//     namespaces a target's namespaceSelector is matched against.
//
// Like fluxcd/pkg's ssa, it is a library of verbs over a controller-runtime
// client: it keeps no state between calls, watches nothing and writes no
// status. The reconciler (operator/controller) adds what only a running
// operator has: caches, drift, the write-war guard, health, waves and
// status, and decides when to apply, prune or wait. So that `engine diff`
// and the UI need not link the reconciler, this package must not import
// operator/controller (deps_test.go checks it), nor anything of cmd/ or
// ui/.
package applier
