package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// versionUnknown is the resourceVersion of a restored object whose owned
// fields changed while the operator was away: it matches no live version,
// so checkDrift finds the drift and corrects or reports it.
const versionUnknown = "unknown"

// restoreRecord rebuilds the record of a target that the reconciler does
// not remember (it restarted) from what the cluster and the status tell:
// an object of the target's inventory that carries our owner label and the
// digest of its desired object was applied as it is desired now, and
// needs no apply unless the fields we own changed. It returns nil when no
// object can be restored; a partial record when only some can (the others
// are applied). items are the inventory's entries of the target.
func restoreRecord(ctx context.Context, ms *v1alpha1.ManifestSync, c *cluster, a *applier, revision string, t *engine.TargetResult, items []inventoryItem) *targetRecord {
	inventory := map[v1alpha1.ObjectID]inventoryItem{}
	for _, it := range items {
		if it.cluster == c.ref {
			inventory[it.id] = it
		}
	}
	if len(inventory) == 0 {
		return nil
	}
	rec := &targetRecord{revision: revision, generation: ms.Generation, digest: t.Digest}
	for i, obj := range t.Objects {
		it, ok := inventory[v1alpha1.IDOf(obj)]
		if !ok || it.version != obj.GroupVersionKind().Version {
			rec.partial = true
			continue
		}
		_, annotated := ssa.AsApplied(obj, t.Digests[i]) // the digest annotation it was applied with
		o, ok := restoreObject(ctx, c, a, it, annotated, ms.Spec.Policy.Drift)
		if !ok {
			rec.partial = true
			continue
		}
		rec.objects = append(rec.objects, o)
	}
	if len(rec.objects) == 0 {
		return nil
	}
	return rec
}

// restoreObject is an inventory object as the last apply left it, if it
// is still ours with digest, the DigestAnnotation that applying the
// desired object writes (ssa.AsApplied). An object applied otherwise (by an
// operator that sent a Secret's stringData as it is) is not restored, and
// so is applied once more.
func restoreObject(ctx context.Context, c *cluster, a *applier, it inventoryItem, digest string, policy v1alpha1.DriftPolicy) (appliedObject, bool) {
	o := appliedObject{item: it}
	left := policy == v1alpha1.DriftReport || policy == v1alpha1.DriftIgnore // drift is left as it is
	switch {
	case (it.missing || it.drifted) && !left, it.fields == 0:
		return o, false
	case it.missing:
		return o, true
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(it.gvk())
	read := c.managed
	if c.remote {
		read = c.live // a remote cluster has no cache
	}
	err := read.Get(ctx, objectKey(it.id), meta)
	if err != nil && c.shard != "" && !c.remote {
		// The cache holds this replica's share only: an object the
		// ManifestSync's last owner labelled is read from the API server.
		err = c.live.Get(ctx, objectKey(it.id), meta)
	}
	if err != nil {
		return o, false
	}
	if meta.Labels[OwnerLabel] != a.owner || meta.Annotations[DigestAnnotation] != digest {
		return o, false
	}
	if c.shard != "" && meta.Labels[ShardLabel] != c.shard && !(it.drifted && left) {
		// Labelled by another replica (the ManifestSync moved here):
		// applied again, with this replica's label, so that its cache
		// holds it. A drift left as it is by policy stays so, and the
		// object is read from the API server instead.
		return o, false
	}
	fields := ownedFields(meta, a.fieldManager())
	switch {
	case fields == it.fields:
		o.resourceVersion = meta.ResourceVersion
	case policy == v1alpha1.DriftIgnore:
		o.resourceVersion, o.item.fields = meta.ResourceVersion, fields
	default:
		o.resourceVersion = versionUnknown
	}
	return o, true
}
