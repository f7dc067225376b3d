package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// DefaultResync is how often the sharder checks the assignment without an
// event; events (a Lease or a ManifestSync added, changed or deleted) and
// the next expiry of a Lease wake it sooner.
const DefaultResync = 30 * time.Second

// writers bounds the sharder's label writes in flight.
const writers = 8

// DefaultHandoverGap is how long a ManifestSync stays unowned after its
// old owner let go of it, before the sharder labels it with its new owner.
const DefaultHandoverGap = 2 * time.Second

// DeadLeaseAge is how long after its last renewal the Lease of a replica
// that died without deleting it (kill -9, an OOM kill, a fence) is deleted
// by the sharder, when no ManifestSync is labelled with its ID any more:
// pods of a Deployment get new names, so such Leases would pile up.
const DeadLeaseAge = time.Hour

// Sharder assigns ManifestSyncs to the live replicas. It runs in one
// replica only, the holder of the operator's leader lease (NeedLeaderElection),
// and keeps a cache of its own: the metadata of every ManifestSync (the
// replicas' caches hold only their share) and the shard Leases of
// Namespace.
//
// Each pass computes Assign over the live members and, for each
// ManifestSync whose owner differs from its assignment: without an owner,
// it labels it with its new owner at once; with an owner whose Lease has
// expired (or is gone), it relabels it at once, the old owner having
// fenced itself before expiry; with a live owner, it labels it to drain,
// and gives it to its new owner only once the old one has acknowledged by
// removing both labels. Each write is conditional on the labels it read
// (a JSON patch test, or the resourceVersion), so that a stale cache never
// makes it overwrite an acknowledgement or a newer assignment.
//
// A ManifestSync its old owner let go of while live (a drain
// acknowledged, or a replica that stopped and deleted its Lease) waits
// HandoverGap more, by the sharder's clock from when it first saw it so,
// before its new owner gets it: the old owner's last write of its objects
// and the new owner's first are then at least that far apart. A new
// ManifestSync, never owned, is assigned at once, and so is one taken
// from an expired Lease (its owner fenced itself before expiry).
type Sharder struct {
	Client    client.Client
	Namespace string
	// Resync defaults to DefaultResync.
	Resync time.Duration
	// HandoverGap defaults to DefaultHandoverGap; negative is none.
	HandoverGap time.Duration
	Log         logr.Logger

	cache     cache.Cache
	tracker   *Tracker
	wake      chan struct{}
	hand      handovers
	collected time.Time    // when collectDead last ran
	passes    atomic.Int64 // passes run (for tests)
}

// handovers is what the sharder remembers from one pass to the next to
// hold a ManifestSync let go of for the handover gap. It is reset when a
// sharder starts leading: it knows nothing of what happened before.
type handovers struct {
	// start is when this sharder started leading; first is true until
	// its first pass is done.
	start time.Time
	first bool
	// owner is each ManifestSync's owner label at the last pass, by key.
	owner map[string]string
	// released is when a ManifestSync was first seen unowned after an
	// owner, by key, until it has a new one.
	released map[string]time.Time
	// live is when each member seen live at the last pass would expire;
	// left is when a member was first seen gone before its expiry (its
	// Lease deleted by a replica that stopped), until the gap is over.
	live, left map[string]time.Time
}

func (h *handovers) reset(now time.Time) {
	*h = handovers{start: now, first: true, owner: map[string]string{}, released: map[string]time.Time{},
		live: map[string]time.Time{}, left: map[string]time.Time{}}
}

func (s *Sharder) gap() time.Duration {
	switch {
	case s.HandoverGap < 0:
		return 0
	case s.HandoverGap == 0:
		return DefaultHandoverGap
	}
	return s.HandoverGap
}

// NewSharder makes a sharder whose cache reads through cfg, of the
// ManifestSyncs sel matches (all when nil; --watch-label-selector) and
// the Leases of namespace.
func NewSharder(cfg *rest.Config, scheme *runtime.Scheme, c client.Client, namespace string, sel labels.Selector) (*Sharder, error) {
	ca, err := cache.New(cfg, cache.Options{
		Scheme: scheme,
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{namespace: {}}},
			msMeta():                {Label: sel, Transform: keepShardMeta},
		},
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("sharder cache: %w", err)
	}
	return &Sharder{Client: c, Namespace: namespace, cache: ca,
		tracker: &Tracker{Reader: ca, Namespace: namespace}, wake: make(chan struct{}, 1)}, nil
}

// NeedLeaderElection is true: one sharder at a time.
func (s *Sharder) NeedLeaderElection() bool { return true }

func (s *Sharder) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// keepShardMeta keeps of a ManifestSync's metadata what a pass reads:
// its name, namespace, resourceVersion (assign's precondition), deletion
// and shard labels, so that the sharder holds a few hundred bytes of
// each, not its annotations (kubectl's last-applied-configuration is the
// whole ManifestSync) or its other labels.
func keepShardMeta(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}}
	for _, k := range []string{OwnerLabel, DrainLabel} {
		if v, ok := m.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			out.Labels[k] = v
		}
	}
	return out, nil
}

// changesShards says whether an update of a ManifestSync's metadata or of
// a Lease (as the sharder's cache holds them) can change an assignment:
// a shard label or the deletion of a ManifestSync, the holder of a Lease
// or its acquisition (a process taking it, a restart under one ID). A
// status write (a new resourceVersion, nothing else) or a Lease's renewal
// cannot: a renewal extends an expiry the pass already waits for, and the
// pass at that time finds the Lease renewed.
func changesShards(before, after any) bool {
	switch a := after.(type) {
	case *metav1.PartialObjectMetadata:
		b, ok := before.(*metav1.PartialObjectMetadata)
		return !ok || b.Labels[OwnerLabel] != a.Labels[OwnerLabel] || b.Labels[DrainLabel] != a.Labels[DrainLabel] ||
			!b.DeletionTimestamp.Equal(a.DeletionTimestamp)
	case *coordinationv1.Lease:
		b, ok := before.(*coordinationv1.Lease)
		return !ok || ptr.Deref(b.Spec.HolderIdentity, "") != ptr.Deref(a.Spec.HolderIdentity, "") ||
			ptr.Deref(b.Spec.LeaseDurationSeconds, 0) != ptr.Deref(a.Spec.LeaseDurationSeconds, 0) ||
			!b.Spec.AcquireTime.Equal(a.Spec.AcquireTime)
	}
	return true
}

func msMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ManifestSync"))
	return m
}

// Start runs the sharder until ctx ends.
func (s *Sharder) Start(ctx context.Context) error {
	if err := s.startCache(ctx); err != nil {
		return err
	}
	return s.loop(ctx)
}

// startCache starts the sharder's cache, whose events wake it, and waits
// for it to fill.
func (s *Sharder) startCache(ctx context.Context) error {
	go func() { _ = s.cache.Start(ctx) }()
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.poke() },
		UpdateFunc: func(before, after any) {
			if changesShards(before, after) {
				s.poke()
			}
		},
		DeleteFunc: func(any) { s.poke() },
	}
	for _, obj := range []client.Object{msMeta(), &coordinationv1.Lease{}} {
		inf, err := s.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("sharder: %w", err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("sharder: %w", err)
		}
	}
	if !s.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("sharder: cache not synced: %w", ctx.Err())
	}
	return nil
}

// loop assigns on every event, at the next expiry of a Lease and every
// Resync, until ctx ends.
func (s *Sharder) loop(ctx context.Context) error {
	resync := s.Resync
	if resync <= 0 {
		resync = DefaultResync
	}
	s.hand.reset(time.Now())
	for {
		s.passes.Add(1)
		next, err := s.pass(ctx)
		if err != nil && ctx.Err() == nil {
			s.Log.Error(err, "sharding")
		}
		wait := resync
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 10*time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.wake:
			// Let a burst of events (a thousand creations) settle into
			// one pass.
			time.Sleep(50 * time.Millisecond)
			select {
			case <-s.wake:
			default:
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// pass assigns once, and returns when to look again without an event
// (the next expiry of a live Lease, the end of a handover gap, or sooner
// after a conflict).
func (s *Sharder) pass(ctx context.Context) (time.Time, error) {
	live, err := s.tracker.Live(ctx)
	if err != nil {
		return time.Now().Add(time.Second), err
	}
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ManifestSyncList"))
	if err := s.cache.List(ctx, &list); err != nil {
		return time.Now().Add(time.Second), fmt.Errorf("listing ManifestSyncs: %w", err)
	}
	now := time.Now()
	gap := s.gap()
	h := &s.hand
	var leases map[string]bool
	if h.first {
		if leases, err = s.leaseIDs(ctx); err != nil {
			return time.Now().Add(time.Second), err
		}
	}
	var next time.Time
	ids := make([]string, 0, len(live))
	isLive := map[string]bool{}
	for _, m := range live {
		ids = append(ids, m.ID)
		isLive[m.ID] = true
		if next.IsZero() || m.Expires.Before(next) {
			next = m.Expires
		}
	}
	h.noteLeft(live, now, gap)
	sharderLive.Set(float64(len(live)))
	// hold says until when the ManifestSync o waits for the handover gap
	// (zero: it does not), and remembers its owner for the next pass.
	hold := func(o *metav1.PartialObjectMetadata, owner string) time.Time {
		k := o.Namespace + "/" + o.Name
		prev, known := h.owner[k]
		h.owner[k] = owner
		switch {
		case owner != "":
			delete(h.released, k)
			if isLive[owner] {
				return time.Time{}
			}
			if at, ok := h.left[owner]; ok {
				return at.Add(gap) // its owner stopped and deleted its Lease
			}
			if h.first && !leases[owner] {
				// Its owner's Lease went before this sharder led,
				// perhaps a moment before: a stop, not an expiry. Held
				// from the sharder's start, at this pass and the next
				// ones (noteLeft forgets it after the gap).
				if _, ok := h.left[owner]; !ok {
					h.left[owner] = h.start
				}
				return h.start.Add(gap)
			}
			return time.Time{} // expired: its owner fenced itself long before
		case prev != "":
			if _, ok := h.released[k]; !ok {
				h.released[k] = now // let go of since the last pass
			}
		case !known && h.first:
			// Perhaps let go of a moment before this sharder led: it
			// cannot tell from a new one.
			h.released[k] = h.start
		}
		if at, ok := h.released[k]; ok {
			return at.Add(gap)
		}
		return time.Time{} // new: never owned
	}
	present := make(map[string]bool, len(list.Items))
	holds := make([]time.Time, len(list.Items))
	for i := range list.Items {
		o := &list.Items[i]
		present[o.Namespace+"/"+o.Name] = true
		if until := hold(o, o.Labels[OwnerLabel]); until.After(now) {
			holds[i] = until
			if next.IsZero() || until.Before(next) {
				next = until
			}
		}
	}
	h.forget(present)
	h.first = false
	if now.Sub(s.collected) >= time.Minute {
		s.collected = now
		owners := map[string]bool{}
		for i := range list.Items {
			owners[list.Items[i].Labels[OwnerLabel]] = true
		}
		if err := s.collectDead(ctx, now, isLive, owners); err != nil && ctx.Err() == nil {
			s.Log.Error(err, "deleting the Leases of dead replicas")
		}
	}
	if len(live) == 0 {
		return next, nil
	}
	keys := make([]string, 0, len(list.Items))
	current := map[string]string{}
	for i := range list.Items {
		o := &list.Items[i]
		k := o.Namespace + "/" + o.Name
		keys = append(keys, k)
		if owner := o.Labels[OwnerLabel]; isLive[owner] {
			current[k] = owner
		}
	}
	want := Assign(keys, ids, current)
	// The writes of one pass (a thousand when a replica joins) go out a
	// few at a time.
	var (
		mu       sync.Mutex
		retry    bool
		firstErr error
		wg       sync.WaitGroup
		slots    = make(chan struct{}, writers)
	)
	for i := range list.Items {
		o := &list.Items[i]
		to := want[o.Namespace+"/"+o.Name]
		owner, drain := o.Labels[OwnerLabel], o.Labels[DrainLabel]
		if o.DeletionTimestamp != nil && isLive[owner] {
			continue // its owner finishes its deletion
		}
		var write func() error
		switch {
		case owner == to:
			continue
		case !holds[i].IsZero():
			continue // in its handover gap: looked at again when it ends
		case owner == "":
			write = func() error { return s.assign(ctx, o, to) }
		case !isLive[owner]:
			write = func() error { return s.take(ctx, o, owner, to) }
		case drain == "":
			write = func() error { return s.drain(ctx, o, owner, to) }
		default:
			continue // waiting for owner to acknowledge
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			err := write()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
			case apierrors.IsConflict(err) || apierrors.IsInvalid(err) || apierrors.IsNotFound(err) || isTestFailed(err):
				retry = true // the cache was behind; look again
			case firstErr == nil:
				firstErr = err
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return time.Now().Add(time.Second), firstErr
	}
	if retry {
		return time.Now().Add(200 * time.Millisecond), nil
	}
	return next, nil
}

// noteLeft records the members that were live at the last pass and are
// gone now before their Lease expired (a replica that stopped deletes its
// Lease), and forgets those whose gap is over.
func (h *handovers) noteLeft(live []LiveMember, now time.Time, gap time.Duration) {
	isLive := map[string]bool{}
	for _, m := range live {
		isLive[m.ID] = true
	}
	for id, exp := range h.live {
		if !isLive[id] && now.Before(exp) {
			h.left[id] = now
		}
	}
	clear(h.live)
	for _, m := range live {
		h.live[m.ID] = m.Expires
	}
	for id, at := range h.left {
		if !now.Before(at.Add(gap)) {
			delete(h.left, id)
		}
	}
}

// forget drops what it remembers of ManifestSyncs gone.
func (h *handovers) forget(present map[string]bool) {
	for k := range h.owner {
		if !present[k] {
			delete(h.owner, k)
			delete(h.released, k)
		}
	}
}

// leaseIDs are the IDs of the shard Leases of the namespace, live or not.
func (s *Sharder) leaseIDs(ctx context.Context) (map[string]bool, error) {
	var leases coordinationv1.LeaseList
	if err := s.cache.List(ctx, &leases, client.InNamespace(s.Namespace)); err != nil {
		return nil, fmt.Errorf("listing shard leases in %s: %w", s.Namespace, err)
	}
	ids := map[string]bool{}
	for _, l := range leases.Items {
		if id, ok := strings.CutPrefix(l.Name, LeasePrefix); ok {
			ids[id] = true
		}
	}
	return ids, nil
}

// collectDead deletes the shard Leases renewed last more than
// DeadLeaseAge ago (by their renewTime: a replica that renewed so long ago
// fenced itself long before) of replicas not live and owning nothing, each
// on the condition that it is still the Lease read (its resourceVersion),
// so that a replica taking its Lease back at that moment keeps it.
func (s *Sharder) collectDead(ctx context.Context, now time.Time, live, owners map[string]bool) error {
	var leases coordinationv1.LeaseList
	if err := s.cache.List(ctx, &leases, client.InNamespace(s.Namespace)); err != nil {
		return fmt.Errorf("listing shard leases in %s: %w", s.Namespace, err)
	}
	for i := range leases.Items {
		l := &leases.Items[i]
		id, ok := strings.CutPrefix(l.Name, LeasePrefix)
		if !ok || live[id] || owners[id] || l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) < DeadLeaseAge {
			continue
		}
		err := s.Client.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting Lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		if err == nil {
			s.Log.Info("deleted the Lease of a replica dead for over an hour", "lease", l.Name, "renewed", l.Spec.RenewTime.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// isTestFailed says whether a JSON patch failed its test operation (the
// labels were not as read).
func isTestFailed(err error) bool {
	return err != nil && strings.Contains(err.Error(), "testing value")
}

// assign labels an unowned ManifestSync with its owner, if it is still
// the version read.
func (s *Sharder) assign(ctx context.Context, o *metav1.PartialObjectMetadata, to string) error {
	labels := map[string]any{OwnerLabel: to}
	if o.Labels[DrainLabel] != "" {
		labels[DrainLabel] = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": o.ResourceVersion, "labels": labels}})
	if err := s.Client.Patch(ctx, msMetaOf(o), client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("assigning ManifestSync %s/%s: %w", o.Namespace, o.Name, err)
	}
	movesTotal.WithLabelValues(moveAssigned).Inc()
	return nil
}

// take gives the ManifestSync of an expired replica to another, if its
// owner is still the one read.
func (s *Sharder) take(ctx context.Context, o *metav1.PartialObjectMetadata, from, to string) error {
	ops := []map[string]any{
		{"op": "test", "path": labelPath(OwnerLabel), "value": from},
		{"op": "replace", "path": labelPath(OwnerLabel), "value": to},
	}
	if _, ok := o.Labels[DrainLabel]; ok {
		ops = append(ops, map[string]any{"op": "remove", "path": labelPath(DrainLabel)})
	}
	if err := s.jsonPatch(ctx, o, ops, "reassigning"); err != nil {
		return err
	}
	movesTotal.WithLabelValues(moveExpired).Inc()
	s.Log.Info("reassigned from an expired replica", "manifestSync", client.ObjectKeyFromObject(o), "from", from, "to", to)
	return nil
}

// drain tells the live owner of a ManifestSync to let go of it.
func (s *Sharder) drain(ctx context.Context, o *metav1.PartialObjectMetadata, owner, to string) error {
	ops := []map[string]any{
		{"op": "test", "path": labelPath(OwnerLabel), "value": owner},
		{"op": "add", "path": labelPath(DrainLabel), "value": to},
	}
	if err := s.jsonPatch(ctx, o, ops, "draining"); err != nil {
		return err
	}
	drainsTotal.Inc()
	return nil
}

func (s *Sharder) jsonPatch(ctx context.Context, o *metav1.PartialObjectMetadata, ops []map[string]any, verb string) error {
	patch, _ := json.Marshal(ops)
	if err := s.Client.Patch(ctx, msMetaOf(o), client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return fmt.Errorf("%s ManifestSync %s/%s: %w", verb, o.Namespace, o.Name, err)
	}
	return nil
}

func msMetaOf(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	m := msMeta()
	m.Namespace, m.Name = o.Namespace, o.Name
	return m
}

// labelPath is the JSON pointer of a label.
func labelPath(key string) string {
	return "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
