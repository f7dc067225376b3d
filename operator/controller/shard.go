package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sharding (`engine operator --shards auto`, operator/shard) spreads the
// ManifestSyncs over the operator's replicas; each replica's ID is
// Options.ShardID. Every object a replica applies (hooks included)
// carries ShardLabel with its ID, as its ManifestSync carries
// operator/shard.OwnerLabel, and the replica's cache of managed objects
// selects only the objects carrying its own (managedObjectsSelector), so
// that what each replica holds falls with the number of replicas.
//
// When a ManifestSync moves to another replica its objects still carry
// the old replica's label, and are absent from the new owner's cache
// until it applies them. The cache is never taken as the truth about
// them:
//   - the new owner has no record of the ManifestSync: rebuilding one
//     (restoreObject) reads an object its cache does not hold from the API
//     server, and one labelled by another replica is not restored but
//     applied again, with the new label: one write per object on a move
//     (a drift that spec.policy.drift Report or Ignore leaves as it is
//     stays so, and the object is read from the API server);
//   - a record that outlived a move and back (observe: readLive) finds
//     another replica's label and applies the object again (checkDrift,
//     syncTarget's retries), without calling it drift;
//   - drift, health (judge) and the apply's own read of the live object
//     (applier.Manager.liveMetadata) read an object the cache does not
//     hold from the API server, never taking it as gone;
//   - prune and the finalizer (ownedObject) read every inventory object
//     from the API server and judge it ours by OwnerLabel alone: an
//     object labelled by another replica is still pruned, deleted or
//     orphaned when the inventory names it;
//   - the inventory is built from what the sync applied, not from the
//     cache.
// Without sharding no ShardLabel is written and nothing of this applies:
// a stale ShardLabel (of an operator sharded before) is left as it is.

// foreign reports whether meta, an object of ours read from c, carries
// another replica's ShardLabel, or none, while this replica is sharded.
func (c *cluster) foreign(meta metav1.Object) bool {
	return c.shard != "" && meta.GetLabels()[ShardLabel] != c.shard
}
