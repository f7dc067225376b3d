package shard

import (
	"context"
	"fmt"
	"time"

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
	// ShutdownGrace is how long a reconcile in flight may go on once ctx
	// ends (the operator stops), as the reconciler's own grace, which the
	// operator then sets to nothing: the fence must cut a reconcile short
	// at once, grace or not.
	ShutdownGrace time.Duration
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
				// Deleted, or moved away (its owner label gone): the
				// reconciler forgets what it held of it.
				return inner.Reconcile(ctx, req)
			}
			return reconcile.Result{}, err
		}
		if ms.Labels[OwnerLabel] != r.ID {
			return reconcile.Result{}, nil
		}
		fctx, cancel := r.fence(ctx)
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

// fence is the context of one reconcile: cancelled at once when the
// Member's fence falls, and ShutdownGrace after ctx ends.
func (r *Replica) fence(ctx context.Context) (context.Context, context.CancelFunc) {
	fenced, stop := r.Member.Fence(context.Background())
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	if fenced.Err() != nil {
		stop()
		cancel(ErrFenced)
		return out, func() {}
	}
	go func() {
		defer stop()
		select {
		case <-fenced.Done():
			cancel(ErrFenced)
			return
		case <-out.Done():
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(r.ShutdownGrace)
		defer t.Stop()
		select {
		case <-fenced.Done():
			cancel(ErrFenced)
		case <-out.Done():
		case <-t.C:
			cancel(fmt.Errorf("shutting down: the reconcile did not finish within the shutdown grace of %s", r.ShutdownGrace))
		}
	}()
	return out, func() { cancel(context.Canceled) }
}

// ack removes the owner and drain labels, if the owner is still this
// replica.
func (r *Replica) ack(ctx context.Context, ms *v1alpha1.ManifestSync) error {
	m := msMeta()
	m.Namespace, m.Name = ms.Namespace, ms.Name
	patch := fmt.Sprintf(`[{"op":"test","path":%q,"value":%q},{"op":"remove","path":%q},{"op":"remove","path":%q}]`,
		labelPath(OwnerLabel), r.ID, labelPath(OwnerLabel), labelPath(DrainLabel))
	if err := r.Client.Patch(ctx, m, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
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

// NeedLeaderElection is false: every replica counts its own.
func (r *Replica) NeedLeaderElection() bool { return false }

// Start keeps the owned metric up to date (every five seconds) until ctx
// ends.
func (r *Replica) Start(ctx context.Context) error {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		_, _ = r.Owned(ctx) // a cache not yet synced counts next time
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
