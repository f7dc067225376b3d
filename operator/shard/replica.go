package shard

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
//
// A process that starts under an ID that ran before (a restart after
// kill -9, or after its fence fell) may find ManifestSyncs still labelled
// with it that the sharder is taking from the expired Lease at that very
// moment. So before it reconciles anything (Start, once its Member holds
// the Lease) it lets go of every ManifestSync labelled with its ID, as a
// drain's acknowledgement does, and the sharder assigns them afresh after
// its handover gap; and it confirms each ManifestSync's owner label with
// the API server (APIReader) before its first reconcile in this process,
// since its cache may still show one the sharder moved a moment before.
type Replica struct {
	// Reader reads ManifestSyncs (the replica's cache); Client writes the
	// acknowledgement; APIReader reads from the API server (Reader when
	// nil).
	Reader    client.Reader
	Client    client.Client
	APIReader client.Reader
	// Selector, when set, is --watch-label-selector: the replica lets go
	// only of the ManifestSyncs it matches (an operator of another
	// selector may run a replica of the same ID).
	Selector labels.Selector
	ID       string
	Member   *Member
	// ShutdownGrace is how long a reconcile in flight may go on once ctx
	// ends (the operator stops), as the reconciler's own grace, which the
	// operator then sets to nothing: the fence must cut a reconcile short
	// at once, grace or not.
	ShutdownGrace time.Duration

	once      sync.Once
	ready     chan struct{} // closed once Start has let go of the ManifestSyncs of an earlier process
	mu        sync.Mutex
	confirmed map[types.NamespacedName]bool // owner label confirmed by the API server in this process
}

func (r *Replica) init() {
	r.once.Do(func() {
		r.ready = make(chan struct{})
		r.confirmed = map[types.NamespacedName]bool{}
	})
}

// Ready is closed when the replica may reconcile: it holds its Lease and
// has let go of what an earlier process of its ID owned.
func (r *Replica) Ready() <-chan struct{} {
	r.init()
	return r.ready
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
	r.init()
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		select {
		case <-r.ready:
		case <-ctx.Done():
			return reconcile.Result{}, nil // stopping before it held its Lease
		}
		var ms v1alpha1.ManifestSync
		if err := r.Reader.Get(ctx, req.NamespacedName, &ms); err != nil {
			if apierrors.IsNotFound(err) {
				// Deleted, or moved away (its owner label gone): the
				// reconciler forgets what it held of it.
				r.forget(req.NamespacedName)
				return inner.Reconcile(ctx, req)
			}
			return reconcile.Result{}, err
		}
		if ms.Labels[OwnerLabel] != r.ID {
			r.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		if ok, err := r.confirm(ctx, req.NamespacedName, &ms); err != nil || !ok {
			return reconcile.Result{}, err
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

// confirm reads ms from the API server before its first reconcile in this
// process, and says whether it is still this replica's (ms then holds
// what the server has).
func (r *Replica) confirm(ctx context.Context, key types.NamespacedName, ms *v1alpha1.ManifestSync) (bool, error) {
	r.mu.Lock()
	done := r.confirmed[key]
	r.mu.Unlock()
	if done || r.APIReader == nil {
		return true, nil
	}
	if err := r.APIReader.Get(ctx, key, ms); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // deleted: the cache's event follows
		}
		return false, fmt.Errorf("reading ManifestSync %s: %w", key, err)
	}
	if ms.Labels[OwnerLabel] != r.ID {
		return false, nil // moved a moment before: the cache's event follows
	}
	r.mu.Lock()
	r.confirmed[key] = true
	r.mu.Unlock()
	return true, nil
}

func (r *Replica) forget(key types.NamespacedName) {
	r.mu.Lock()
	delete(r.confirmed, key)
	r.mu.Unlock()
}

// releaseEarlier lets go of every ManifestSync labelled with this
// replica's ID, read from the API server: what an earlier process of the
// ID owned, which the sharder may be moving at this moment. Each release
// is conditional on the label (a JSON patch test), so one the sharder
// moved first is left alone.
func (r *Replica) releaseEarlier(ctx context.Context) (int, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Reader
	}
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ManifestSyncList"))
	sel := OwnerSelector(r.ID)
	if r.Selector != nil {
		reqs, _ := r.Selector.Requirements()
		sel = sel.Add(reqs...)
	}
	if err := reader.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, fmt.Errorf("listing the ManifestSyncs labelled %s=%s: %w", OwnerLabel, r.ID, err)
	}
	n := 0
	for i := range list.Items {
		o := &list.Items[i]
		ops := fmt.Sprintf(`{"op":"test","path":%q,"value":%q},{"op":"remove","path":%q}`,
			labelPath(OwnerLabel), r.ID, labelPath(OwnerLabel))
		if _, ok := o.Labels[DrainLabel]; ok {
			ops += fmt.Sprintf(`,{"op":"remove","path":%q}`, labelPath(DrainLabel))
		}
		m := msMeta()
		m.Namespace, m.Name = o.Namespace, o.Name
		if err := r.Client.Patch(ctx, m, client.RawPatch(types.JSONPatchType, []byte("["+ops+"]"))); err != nil {
			if isTestFailed(err) || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
				continue // moved or deleted meanwhile
			}
			return n, fmt.Errorf("letting go of ManifestSync %s/%s: %w", o.Namespace, o.Name, err)
		}
		n++
	}
	return n, nil
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

// Start waits for the Member to hold its Lease, lets go of what an
// earlier process of the ID owned (retrying every second until that
// succeeds), opens Ready, then keeps the owned metric up to date (every
// five seconds) until ctx ends.
func (r *Replica) Start(ctx context.Context) error {
	r.init()
	select {
	case <-r.Member.Acquired():
	case <-r.Member.Fenced():
		return nil
	case <-ctx.Done():
		return nil
	}
	for {
		n, err := r.releaseEarlier(ctx)
		if err == nil {
			if n > 0 {
				r.Member.Log.Info("let go of the ManifestSyncs an earlier process of this replica owned", "replica", r.ID, "count", n)
			}
			break
		}
		r.Member.Log.Error(err, "letting go of an earlier process's ManifestSyncs", "replica", r.ID)
		select {
		case <-ctx.Done():
			return nil
		case <-r.Member.Fenced():
			return nil
		case <-time.After(time.Second):
		}
	}
	close(r.ready)
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
