package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
)

// targetOutcome is what syncing one target did.
type targetOutcome struct {
	target *engine.TargetResult
	// changes has one entry per object applied this time; empty when the
	// target was steady or failed as a whole.
	changes []Change
	// err is why the whole target failed before any object was applied.
	err error
	// empty is set when the target's output turned empty while its
	// inventory is not (and spec.policy.allowEmpty is false): nothing was
	// applied or pruned.
	empty *emptyOutputError
	// steady is set when nothing changed since the last apply, so nothing
	// was sent.
	steady bool
	// drift describes objects someone changed or deleted; corrected is
	// set when they were re-applied (policy Correct).
	drift     []string
	corrected bool
	// record is what to remember of the target; nil forgets it.
	record *targetRecord
	// waiting is set when, under spec.wait, a wave is not Current yet:
	// the waves after it were not applied.
	waiting *waveWait
	// health is that of every object of the target that is ours and not
	// Current, and of those of the waves not applied yet; see judgeTarget.
	health []objectHealth
	// current counts the objects judged Current, which health leaves
	// out: with a fan-out, tens of thousands.
	current int
	// settled counts the changes that went as planned, which settle lets
	// go of once the target is judged.
	settled tally
	// cluster is where the target's objects are; nil when it could not
	// be reached.
	cluster *cluster
	// hooks is the run of the target's hooks; nil without hooks.
	hooks *hookRun
}

// redactOutcomes masks the evaluation's Secret values in every error of a
// sync before anything reports it: the API server's errors quote the
// values they refuse (an invalid label, a field of the wrong form), and
// from here errors reach status, events and logs.
func redactOutcomes(red *redact.Redactor, outcomes []*targetOutcome, pr *pruneResult) {
	for _, o := range outcomes {
		o.err = red.Error(o.err)
		for i := range o.changes {
			o.changes[i].Err = red.Error(o.changes[i].Err)
		}
	}
	pr.err = red.Error(pr.err)
}

// tally counts changes by what they did.
type tally struct {
	created, configured int
	unchanged           int // Unchanged or Skipped
}

func (t *tally) add(c Change) bool {
	switch {
	case c.Err != nil:
		return false
	case c.Action == ActionCreated:
		t.created++
	case c.Action == ActionConfigured:
		t.configured++
	case c.Action == ActionUnchanged, c.Action == ActionSkipped:
		t.unchanged++
	default:
		return false
	}
	return true
}

// settle lets go, once the target is judged, of the changes that went as
// planned, counting them: its record holds their objects, and with a
// fan-out they are tens of thousands until the sync is reported. What
// failed or conflicts stays, and a partial record keeps them all (the
// inventory takes the objects that are ours from them).
func (o *targetOutcome) settle() {
	if o.record == nil || o.record.partial {
		return
	}
	var kept []Change
	for _, c := range o.changes {
		if !o.settled.add(c) {
			kept = append(kept, c)
		}
	}
	o.changes = kept
}

// tally counts the target's changes, settled or not.
func (o *targetOutcome) tally() tally {
	t := o.settled
	for _, c := range o.changes {
		t.add(c)
	}
	return t
}

// wrote reports whether the sync created or configured an object.
func (o *targetOutcome) wrote() bool {
	t := o.tally()
	return t.created+t.configured > 0
}

// failures are the target's errors, conflicts left out.
func (o *targetOutcome) failures() []error {
	if o.err != nil {
		return []error{o.err}
	}
	var errs []error
	for _, c := range o.changes {
		if c.Action == ActionFailed {
			errs = append(errs, c.Err)
		}
	}
	return errs
}

func (o *targetOutcome) conflicts() []error {
	var errs []error
	for _, c := range o.changes {
		if c.Action == ActionConflict {
			errs = append(errs, c.Err)
		}
	}
	return errs
}

// applied reports whether no object of the target failed or conflicts
// so far.
func (o *targetOutcome) applied() bool {
	return len(o.failures()) == 0 && len(o.conflicts()) == 0
}

// ok reports whether every object of the target was applied (or kept).
func (o *targetOutcome) ok() bool {
	return len(o.failures()) == 0 && len(o.conflicts()) == 0 && o.empty == nil && o.waiting == nil &&
		(o.hooks == nil || o.hooks.succeeded())
}

func (o *targetOutcome) state() v1alpha1.TargetState {
	switch {
	case len(o.failures()) > 0 || o.empty != nil || (o.hooks != nil && o.hooks.failed != nil):
		return v1alpha1.TargetFailed
	case len(o.conflicts()) > 0:
		return v1alpha1.TargetConflict
	case o.waiting != nil || (o.hooks != nil && o.hooks.pending()):
		return v1alpha1.TargetPending
	}
	return v1alpha1.TargetSynced
}

// appendOwned appends to items the inventory items of the objects that
// are ours after the sync.
func (o *targetOutcome) appendOwned(items []*inventoryItem) []*inventoryItem {
	if o.record != nil && !o.record.partial {
		for i, a := range o.record.objects {
			if a.resourceVersion != "" || a.item.missing {
				items = append(items, &o.record.objects[i].item) // a record is not changed once made
			}
		}
		return items
	}
	for _, c := range o.changes {
		if c.ours() {
			it := c.Item
			it.fields = c.Fields
			items = append(items, &it)
		}
	}
	return items
}

// syncTargets syncs every target, several at once; one target failing
// does not stop the others. inventory reads the ManifestSync's inventory,
// from which the records of a restarted operator are rebuilt.
func (r *Reconciler) syncTargets(ctx context.Context, ms *v1alpha1.ManifestSync, res *engine.Result, st *syncState, inventory iter.Seq[inventoryItem]) []*targetOutcome {
	checker := st.checker(ms)
	a := &applier{client: r.Client, live: r.APIReader, managed: r.managed, owner: r.Options.owner(ms), shard: r.Options.ShardID, manager: r.Options.fieldManager(),
		policy: ms.Spec.Policy.Resources, guard: r.guard, health: checker}
	held := r.heldEmpty(ms, res)
	hooks := hookRunsOf(ms)
	out := make([]*targetOutcome, len(res.Targets))
	// Each target's record replaces its last one as soon as it is synced,
	// so that a fan-out never holds two records of every target.
	var records sync.Mutex
	record := func(id string) *targetRecord {
		records.Lock()
		defer records.Unlock()
		return st.targets[id]
	}
	remember := func(o *targetOutcome) {
		records.Lock()
		defer records.Unlock()
		if o.record != nil {
			st.targets[o.target.ID()] = o.record
		} else {
			delete(st.targets, o.target.ID())
		}
	}
	// The inventory by target, of the targets whose record is rebuilt
	// after a restart: read through once, not once per target; the
	// entries of targets that have a record are not kept.
	restoring := sync.OnceValue(func() map[string][]inventoryItem {
		by := map[string][]inventoryItem{}
		for it := range inventory {
			if record(it.target) == nil {
				by[it.target] = append(by[it.target], it)
			}
		}
		return by
	})
	one := func(t *engine.TargetResult) *targetOutcome {
		if e := held[t.ID()]; e != nil {
			return &targetOutcome{target: t, empty: e}
		}
		start := time.Now()
		rec := record(t.ID())
		// The objects of a target the evaluation did not keep
		// (engine.Options.Compact) are made again for its sync, and let
		// go after it: the outcome keeps the target without them. A
		// target applied completely as it is now is only checked for
		// drift, from its record: its objects are made again only to
		// correct one.
		full := t
		if !rec.complete(res.Revision, ms.Generation, t) || hooks.unfinished(t) {
			var err error
			if full, err = t.WithManifests(); err != nil {
				return &targetOutcome{target: t, err: err}
			}
		}
		var restore []inventoryItem
		if rec == nil {
			restore = restoring()[t.ID()]
		}
		o := r.syncTarget(ctx, ms, a, res.Revision, full, rec, restore)
		r.judgeTarget(ctx, checker, o)
		o.settle()
		o.target = t
		if !o.steady {
			syncDuration.WithLabelValues(ms.Namespace, ms.Name, t.ID()).Observe(time.Since(start).Seconds())
		}
		return o
	}
	// Workers take the next target from a shared counter.
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(r.Options.targetWorkers(), len(res.Targets)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(res.Targets); i = int(next.Add(1) - 1) {
				out[i] = one(res.Targets[i])
				remember(out[i])
			}
		})
	}
	wg.Wait()
	return out
}

// syncTarget applies one target's objects, or nothing when they are as
// they were left (steady state), or only the objects that drifted. With no
// record, inventory (the target's entries) rebuilds one.
func (r *Reconciler) syncTarget(ctx context.Context, ms *v1alpha1.ManifestSync, a *applier, revision string, t *engine.TargetResult, rec *targetRecord, inventory []inventoryItem) *targetOutcome {
	out := &targetOutcome{target: t}
	id := t.ID() // once: every item of the target holds it
	c, err := r.clusterOf(ctx, ms, t)
	if err != nil {
		out.err = fmt.Errorf("target %q: %w", id, err)
		return out
	}
	a = c.applier(a)
	out.cluster = c
	// Hooks are written as any object: t with them named is gated and
	// its kinds watched; the ordinary objects are applied in waves.
	gated, ordinary, hooks := t, t, (*hookRun)(nil)
	if made(t) {
		if gated, ordinary, hooks, err = r.planHooks(ms, t, a.health); err != nil {
			out.err = fmt.Errorf("target %q: %w", id, err)
			return out
		}
	}
	t = gated
	if err := r.checkWrites(ctx, ms, c, t, rec); err != nil {
		out.err = fmt.Errorf("target %q: %w", id, err)
		return out
	}
	if err := checkNamespace(ctx, c, t, rec); err != nil {
		out.err = c.targetError(t, err)
		return out
	}
	// Remote clusters' objects are not watched: their drift is found at
	// each resync (spec.interval, or any other trigger). The kinds a CRD
	// of the target defines are watched once it is Established.
	for _, gvk := range kindsOf(t, rec) {
		if c.remote {
			break
		}
		if err := r.watchKind(ctx, a.health, gvk); err != nil && !apimeta.IsNoMatchError(err) {
			out.err = fmt.Errorf("target %q: %s: %w", t.ID(), gvk.Kind, err)
			return out
		}
	}
	t = ordinary
	out.target = t
	if rec == nil {
		rec = restoreRecord(ctx, ms, c, a, revision, t, inventory) // after a restart
	}
	if hooks != nil {
		out.hooks = hooks
		if !hooks.before(ctx, c) { // PreSync hooks not all succeeded
			if rec != nil { // kept, for the objects' health; not complete
				kept := *rec
				kept.partial = true
				out.record = &kept
			}
			return out
		}
	}
	if rec != nil && rec.since.IsZero() {
		rec.since = time.Now() // a record rebuilt after a restart: spec.timeout counts from here
	}
	var applied map[v1alpha1.ObjectID]appliedObject // by a partial record of the same desired state
	since := time.Now()
	if rec.complete(revision, ms.Generation, t) && (hooks == nil || hooks.succeeded()) {
		return r.checkDrift(ctx, ms, c, a, t, rec, out)
	}
	if rec != nil && rec.revision == revision && rec.generation == ms.Generation && rec.digest == t.Digest {
		since = rec.since
		applied = map[v1alpha1.ObjectID]appliedObject{}
		for _, o := range rec.objects {
			if o.resourceVersion != "" {
				applied[o.item.id] = o
			}
		}
	} else if rec != nil && rec.generation == ms.Generation {
		applied = unchangedObjects(t, rec)
	}
	waves, err := engine.Waves(t.Objects)
	if err != nil {
		out.err = fmt.Errorf("target %q: %w", t.ID(), err)
		return out
	}
	if hooks != nil {
		waves = hooks.syncWaves(waves)
	}
	out.changes = make([]Change, 0, len(t.Objects))
	digests := make(map[*unstructured.Unstructured]string, len(t.Objects))
	for i, obj := range t.Objects {
		digests[obj] = t.Digests[i]
	}
	apply := func(obj *unstructured.Unstructured) error {
		if !c.remote {
			if err := r.watchKind(ctx, a.health, obj.GroupVersionKind()); err != nil {
				out.changes = append(out.changes, Change{Item: itemOf(obj, id), Action: ActionFailed,
					Err: fmt.Errorf("%s: %w", v1alpha1.IDOf(obj), err)})
				return nil
			}
		}
		// A retry (another object failed or conflicts, or a wave was
		// not Current) leaves alone what it applied already, unless that
		// changed since.
		if o, ok := applied[v1alpha1.IDOf(obj)]; ok {
			if now, err := observe(ctx, c, o, a.fieldManager()); err == nil && !o.isDrift(now) && !o.moved(now) {
				item := o.item // drifted still as someone left it
				out.changes = append(out.changes, Change{Item: item, Action: ActionUnchanged, ResourceVersion: now.resourceVersion, Fields: now.fields, digest: o.digest})
				return nil
			}
		}
		ch := c.apply(ctx, a, obj, digests[obj], id)
		if c.down(ch.Err) {
			// The cluster is unreachable or refuses us: the other objects
			// would fail the same way, each after a timeout.
			return c.targetError(t, ch.Err)
		}
		out.changes = append(out.changes, ch)
		return nil
	}
	for wi, w := range waves {
		first := len(out.changes)
		// A wave's objects are applied one by one in its order (Argo
		// CD's), the custom resources after the CRDs.
		lastCRD := -1
		for i, obj := range w.Objects {
			if isCRD(obj) {
				lastCRD = i
			}
		}
		for i, obj := range w.Objects {
			if err := apply(obj); err != nil {
				out.changes, out.err = nil, err
				return out
			}
			if i == lastCRD {
				// The kinds the CRDs define are served once they are
				// Established.
				r.awaitEstablished(ctx, c, a.health, out.changes[first:])
			}
		}
		if hooks != nil && (!out.applied() || !hooks.syncWave(ctx, w.N)) {
			break // an apply failed (retried), or a Sync hook has not succeeded
		}
		if wi+1 < len(waves) && ms.Spec.Wait {
			if wait := r.waveWait(ctx, c, a.health, w.N, waves[wi+1:], out.changes[first:]); wait != nil {
				out.waiting = wait
				break
			}
		}
	}
	if hooks != nil && hooks.pending() && out.waiting == nil && out.applied() && len(out.changes) == len(t.Objects) {
		hooks.after(ctx, out.changes)
	}
	out.record = newRecord(revision, ms.Generation, t.Digest, out.changes)
	out.record.since = since
	out.record.partial = !out.ok()
	return out
}

func newRecord(revision string, generation int64, digest string, changes []Change) *targetRecord {
	rec := &targetRecord{revision: revision, generation: generation, digest: digest, objects: make([]appliedObject, 0, len(changes))}
	for _, c := range changes {
		item := c.Item
		item.fields, item.missing = c.Fields, false
		rec.objects = append(rec.objects, appliedObject{item: item, resourceVersion: c.ResourceVersion, digest: c.digest})
	}
	return rec
}

// unchangedObjects are the objects of rec, applied at the same generation
// of the spec, whose desired digest is the same in t: new inputs that
// change one object of a target (a Secret joining an object set) apply
// that object only, the others are checked for drift in the cache.
func unchangedObjects(t *engine.TargetResult, rec *targetRecord) map[v1alpha1.ObjectID]appliedObject {
	desired := make(map[v1alpha1.ObjectID]digestSum, len(t.Objects))
	for i, obj := range t.Objects {
		desired[v1alpha1.IDOf(obj)] = sumOf(t.Digests[i])
	}
	out := map[v1alpha1.ObjectID]appliedObject{}
	for _, o := range rec.objects {
		if o.resourceVersion != "" && o.digest != 0 && o.digest == desired[o.item.id] {
			out[o.item.id] = o
		}
	}
	return out
}

// emptyOutputError is a target left alone because its output turned
// empty while its inventory is not.
type emptyOutputError struct {
	target    string
	inventory int
	unread    error // the inventory could not be read
}

func (e *emptyOutputError) Error() string {
	if e.unread != nil {
		return fmt.Sprintf("target %q: the evaluation returned no objects and its inventory cannot be read; nothing was pruned: %v", e.target, e.unread)
	}
	return fmt.Sprintf("target %q: the evaluation returned no objects while %d are in its inventory; nothing was pruned (set spec.policy.allowEmpty to prune them)",
		e.target, e.inventory)
}

// heldEmpty are the targets, by id, whose output turned empty while their
// inventory is not: unless spec.policy.allowEmpty, nothing of them is
// applied or pruned, so that a transform returning nothing by mistake does
// not delete everything.
func (r *Reconciler) heldEmpty(ms *v1alpha1.ManifestSync, res *engine.Result) map[string]*emptyOutputError {
	if ms.Spec.Policy.AllowEmpty {
		return nil
	}
	if !slices.ContainsFunc(res.Targets, func(t *engine.TargetResult) bool { return t.Len() == 0 }) {
		return nil
	}
	inventory := map[string]int{}
	err := eachInventoryItem(ms, func(it inventoryItem) bool { // never read as empty: on an error every empty target is held
		inventory[it.target]++
		return true
	})
	held := map[string]*emptyOutputError{}
	for _, t := range res.Targets {
		if n := inventory[t.ID()]; t.Len() == 0 && (n > 0 || err != nil) {
			held[t.ID()] = &emptyOutputError{target: t.ID(), inventory: n, unread: err}
		}
	}
	return held
}

// checkDrift compares the objects applied last with the managed cache:
// when none changed in the fields we own (drift.go) the target is steady
// and nothing is sent. A difference is confirmed with the API server (the
// cache may lag behind our own writes), then corrected or reported per
// spec.policy.drift. Drift Ignore looks for none.
func (r *Reconciler) checkDrift(ctx context.Context, ms *v1alpha1.ManifestSync, c *cluster, a *applier, t *engine.TargetResult, rec *targetRecord, out *targetOutcome) *targetOutcome {
	policy := ms.Spec.Policy.Drift
	if policy == v1alpha1.DriftIgnore {
		out.steady, out.record = true, rec
		return out
	}
	// next is the record after the check: rec itself unless an object
	// moved on, so that a steady target's check copies nothing.
	var next *targetRecord
	edit := func() *targetRecord {
		if next == nil {
			n := *rec
			n.objects = slices.Clone(rec.objects)
			next = &n
		}
		return next
	}
	var drifted, moved []int // indexes into rec.objects
	live := map[int]liveObject{}
	for i, o := range rec.objects {
		if o.resourceVersion == "" {
			continue
		}
		now, err := observe(ctx, c, o, a.fieldManager())
		if err != nil {
			out.err = c.targetError(t, err)
			return out
		}
		switch {
		case o.isDrift(now):
			drifted = append(drifted, i)
			live[i] = now
		case o.moved(now):
			moved = append(moved, i) // applied again, with this replica's label
		case now != (liveObject{resourceVersion: o.resourceVersion, fields: o.item.fields, foreign: now.foreign}):
			// Changed in fields that are not ours (its status): the
			// same object, at a later version.
			n := edit()
			n.objects[i].resourceVersion, n.objects[i].item.fields = now.resourceVersion, now.fields
		}
	}
	if len(drifted) == 0 && len(moved) == 0 {
		out.steady = true
		out.record = cmp.Or(next, rec)
		return out
	}
	edit()
	for _, i := range drifted {
		what := "changed"
		if live[i].resourceVersion == "" {
			what = "deleted"
		}
		out.drift = append(out.drift, rec.objects[i].item.id.String()+" ("+what+")")
	}
	// What is applied again: the objects that moved here with their
	// ManifestSync (another replica's shard label on them) and, under
	// policy Correct, those that drifted.
	reapply := moved
	correct := policy == v1alpha1.DriftCorrect || policy == ""
	if !correct {
		// Reported: remember the objects as they are now, so that the
		// same drift is not found again; a deleted one stays in the
		// inventory, missing.
		for _, i := range drifted {
			next.objects[i].resourceVersion, next.objects[i].item.fields = live[i].resourceVersion, live[i].fields
			next.objects[i].item.missing = live[i].resourceVersion == ""
			next.objects[i].item.drifted = live[i].resourceVersion != ""
		}
		if len(moved) == 0 {
			out.record = next
			return out
		}
	} else {
		reapply = append(slices.Clone(drifted), moved...)
	}
	// The objects, when the evaluation did not keep them, are made again
	// to apply them.
	full, err := t.WithManifests()
	if err != nil {
		out.err = err
		return out
	}
	out.target = full
	desired := map[v1alpha1.ObjectID]int{}
	for i, obj := range full.Objects {
		desired[v1alpha1.IDOf(obj)] = i
	}
	for _, i := range reapply {
		j, ok := desired[rec.objects[i].item.id]
		if !ok {
			continue
		}
		ch := c.apply(ctx, a, full.Objects[j], full.Digests[j], t.ID())
		if c.down(ch.Err) {
			out.changes, out.err = nil, c.targetError(t, ch.Err)
			return out
		}
		out.changes = append(out.changes, ch)
		next.objects[i].resourceVersion, next.objects[i].item.fields = ch.ResourceVersion, ch.Fields
	}
	out.corrected = correct && len(drifted) > 0
	// A retry re-applies only what is still not as recorded.
	next.partial = !out.ok()
	out.record = next
	return out
}

// checkNamespace fails a target whose namespace does not exist (unless
// the target creates it): the target's objects cannot be applied, and the
// namespace watch syncs it as soon as the namespace appears.
func checkNamespace(ctx context.Context, c *cluster, t *engine.TargetResult, rec *targetRecord) error {
	if t.Namespace == "" {
		return nil
	}
	needed := false
	for id := range objectIDs(t, rec) {
		if id.Kind == "Namespace" && id.Group == "" && id.Name == t.Namespace {
			return nil
		}
		needed = needed || id.Namespace == t.Namespace
	}
	if !needed {
		return nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.namespaces.Get(ctx, client.ObjectKey{Name: t.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace %q not found", t.Namespace)
		}
		return fmt.Errorf("namespace %q: %w", t.Namespace, err)
	}
	if ns.DeletionTimestamp != nil {
		return fmt.Errorf("namespace %q is being deleted", t.Namespace)
	}
	return nil
}

// kindsOf lists the kinds of t's objects (of its record, when they are
// not made: see objectIDs), each once.
func kindsOf(t *engine.TargetResult, rec *targetRecord) []schema.GroupVersionKind {
	seen := map[schema.GroupVersionKind]bool{}
	var out []schema.GroupVersionKind
	add := func(gvk schema.GroupVersionKind) {
		if !seen[gvk] {
			seen[gvk] = true
			out = append(out, gvk)
		}
	}
	if made(t) {
		for _, o := range t.Objects {
			add(o.GroupVersionKind())
		}
		return out
	}
	for _, o := range rec.objects {
		add(o.item.gvk())
	}
	return out
}

// made reports whether t holds its objects: a target of a compact
// evaluation (engine.Options.Compact) whose objects were not made again
// for its sync holds none.
func made(t *engine.TargetResult) bool { return len(t.Objects) == t.Len() }

// objectIDs are the ids of t's objects; those of its record when they
// are not made, which is only when the record is complete for t's desired
// state (targetRecord.complete), whose objects it names.
func objectIDs(t *engine.TargetResult, rec *targetRecord) iter.Seq[v1alpha1.ObjectID] {
	return func(yield func(v1alpha1.ObjectID) bool) {
		if made(t) {
			for _, o := range t.Objects {
				if !yield(v1alpha1.IDOf(o)) {
					return
				}
			}
			return
		}
		for _, o := range rec.objects {
			if !yield(o.item.id) {
				return
			}
		}
	}
}

// errTargets is returned to the controller when some target failed, so that
// the ManifestSync is retried with backoff.
var errTargets = errors.New("some targets did not sync")
