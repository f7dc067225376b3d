package shard

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// OwnerSelector selects the ManifestSyncs of replica id: the label
// selector of its ManifestSync cache, so that it holds only its share.
func OwnerSelector(id string) labels.Selector {
	r, err := labels.NewRequirement(OwnerLabel, selection.Equals, []string{id})
	if err != nil {
		panic(fmt.Sprintf("shard: owner selector of %q: %v", id, err)) // ValidateID refuses such an ID first
	}
	return labels.NewSelector().Add(*r)
}

// Replica is the replica side of sharding: it reconciles only the
// ManifestSyncs labelled with its ID, each within its Member's fence, and
// acknowledges a drain by removing the owner and drain labels.
type Replica struct {
	// Reader reads ManifestSyncs (the replica's cache); Client writes the
	// acknowledgement.
	Reader client.Reader
	Client client.Client
	ID     string
	Member *Member

	acked sync.Map // keys acknowledged, whose disappearance from the cache is no deletion
}

// Predicate lets through the events of ManifestSyncs of this replica
// (draining ones too, so that their drain is acknowledged).
func (r *Replica) Predicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[OwnerLabel] == r.ID })
}

// Wrap returns inner behind the replica's filter. controller-runtime never
// reconciles one key twice at once, so that when Wrap sees the drain label
// the reconcile in flight of that ManifestSync has ended: it acknowledges
// then, and the object leaves the replica's cache (its owner label gone).
func (r *Replica) Wrap(inner reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		var ms v1alpha1.ManifestSync
		if err := r.Reader.Get(ctx, req.NamespacedName, &ms); err != nil {
			if apierrors.IsNotFound(err) {
				if _, moved := r.acked.LoadAndDelete(req.NamespacedName); moved {
					return reconcile.Result{}, nil // it moved, not deleted
				}
				return inner.Reconcile(ctx, req)
			}
			return reconcile.Result{}, err
		}
		r.acked.Delete(req.NamespacedName)
		if ms.Labels[OwnerLabel] != r.ID {
			return reconcile.Result{}, nil
		}
		fctx, cancel := r.Member.Fence(ctx)
		defer cancel()
		if fctx.Err() != nil {
			return reconcile.Result{}, nil // fenced: the sharder moves it after expiry
		}
		if ms.Labels[DrainLabel] != "" {
			return reconcile.Result{}, r.ack(fctx, &ms)
		}
		return inner.Reconcile(fctx, req)
	})
}

// ack removes the owner and drain labels, if the owner is still this
// replica.
func (r *Replica) ack(ctx context.Context, ms *v1alpha1.ManifestSync) error {
	m := msMeta()
	m.Namespace, m.Name = ms.Namespace, ms.Name
	patch := fmt.Sprintf(`[{"op":"test","path":%q,"value":%q},{"op":"remove","path":%q},{"op":"remove","path":%q}]`,
		labelPath(OwnerLabel), r.ID, labelPath(OwnerLabel), labelPath(DrainLabel))
	r.acked.Store(client.ObjectKeyFromObject(ms), true)
	if err := r.Client.Patch(ctx, m, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		r.acked.Delete(client.ObjectKeyFromObject(ms))
		if isTestFailed(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return nil // no longer ours
		}
		return fmt.Errorf("acknowledging the drain of ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	acksTotal.Inc()
	return nil
}

// Owned counts the ManifestSyncs of the replica's cache (all its own) into
// the owned metric.
func (r *Replica) Owned(ctx context.Context) (int, error) {
	var list v1alpha1.ManifestSyncList
	if err := r.Reader.List(ctx, &list, client.MatchingLabelsSelector{Selector: OwnerSelector(r.ID)}); err != nil {
		return 0, err
	}
	ownedGauge.Set(float64(len(list.Items)))
	return len(list.Items), nil
}
