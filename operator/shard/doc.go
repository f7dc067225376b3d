// Package shard spreads the ManifestSyncs of a cluster over the replicas of
// the operator, on Kubernetes' own primitives only: each replica holds a
// coordination.k8s.io Lease of its own (Member), the replica holding the
// ordinary leader lease assigns each ManifestSync to a live replica by
// consistent hashing with virtual nodes (Ring, Assign, Sharder) and records
// the assignment as the label shard.manifestsync.dev/owner, and an object
// moves only after its old owner has drained it (the label
// shard.manifestsync.dev/drain, acknowledged by the old owner removing both
// labels; Replica). No store, gossip or consensus of its own: the API
// server orders every change.
//
// The design follows timebertt/kubernetes-controller-sharding (one Lease
// per instance, a hash ring over the live Leases, assignment as a label,
// a drain handshake), with one addition: the ring's choice is bounded in
// load (consistent hashing with bounded loads), so that 1,000 objects over
// four replicas stay within 15% of each other, which plain hashing of so
// few keys does not promise.
//
// It imports the API types and controller-runtime, never the reconciler
// (operator/controller) nor the engine.
package shard

// Names fixed by DESIGN.md §9.
const (
	// OwnerLabel holds the ID of the replica that reconciles a ManifestSync.
	OwnerLabel = "shard.manifestsync.dev/owner"
	// DrainLabel tells the owner to let go of a ManifestSync; its value is
	// the ID of the replica it moves to.
	DrainLabel = "shard.manifestsync.dev/drain"
	// LeasePrefix is the prefix of each replica's Lease name, followed by
	// its ID.
	LeasePrefix = "manifestsync-shard-"
)
