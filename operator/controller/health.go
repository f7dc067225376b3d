package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/internal/plural"
)

// defaultHealthTimeout is spec.timeout when the API server did not
// default it.
const defaultHealthTimeout = 5 * time.Minute

// establishTimeout bounds the wait for a CRD just applied to be
// Established, before the objects of its kind are applied.
const establishTimeout = 30 * time.Second

// objectHealth is the health of one object of a target.
type objectHealth struct {
	id v1alpha1.ObjectID
	health.Result
}

func (h objectHealth) String() string {
	return h.id.String() + ": " + h.Message
}

// waveWait is a wave that is not Current yet, under spec.wait: the waves
// after it wait.
type waveWait struct {
	wave, next int
	// pending are the wave's objects that are not Current.
	pending []objectHealth
}

func (w *waveWait) message() string {
	return fmt.Sprintf("wave %d waits for wave %d to be Current: %s", w.next, w.wave, listHealth(w.pending, false))
}

// checker is the health checker of ms's spec.healthChecks, compiled once
// per generation. The engine refuses a spec whose checks do not compile
// before anything is applied, so their errors are not seen here.
func (st *syncState) checker(ms *v1alpha1.ManifestSync) *health.Checker {
	if st.health == nil || st.healthGeneration != ms.Generation {
		st.health, _ = health.New(ms.Spec.HealthChecks)
		st.healthGeneration = ms.Generation
	}
	return st.health
}

// watchKind watches our objects of kind gvk: their metadata for drift
// and, when their health needs it, the whole objects.
func (r *Reconciler) watchKind(ctx context.Context, checker *health.Checker, gvk schema.GroupVersionKind) error {
	if err := r.watches.managed(ctx, gvk); err != nil {
		return err
	}
	if checker.NeedsObject(gvk) {
		return r.watches.health(ctx, gvk)
	}
	return nil
}

func isCRD(obj *unstructured.Unstructured) bool { return isCRDKind(obj.GroupVersionKind().GroupKind()) }

func isCRDKind(gk schema.GroupKind) bool {
	return gk == schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
}

// awaitEstablished waits until the CRDs among changes, just applied, are
// Established, and makes the REST mapper learn the kinds they define. A
// CRD that is not Established in time leaves the objects of its kind to
// fail, each naming it.
func (r *Reconciler) awaitEstablished(ctx context.Context, c *cluster, checker *health.Checker, changes []Change) {
	waited := false
	for i := range changes {
		ch := &changes[i]
		if !ch.ours() || !isCRDKind(ch.Item.gvk().GroupKind()) || (ch.health != nil && ch.health.Status == health.Current) {
			continue
		}
		waited = true
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(ch.Item.gvk())
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, establishTimeout, true, func(ctx context.Context) (bool, error) {
			if err := c.live.Get(ctx, objectKey(ch.Item.id), crd); err != nil {
				// Not found yet in a cache of the API server is retried;
				// anything else (a denied read) ends the wait.
				return false, client.IgnoreNotFound(err)
			}
			res := checker.Check(crd)
			ch.health = &res // as it is now, not as its apply found it
			return res.Status == health.Current, nil
		})
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("not waiting for the CRD to be Established", "crd", ch.Item.id.Name, "timeout", establishTimeout.String(), "error", err.Error())
			continue
		}
		// The API server's discovery may name the kind some time after
		// the CRD is Established (seconds on a loaded server): until the
		// client's REST mapper finds it, which it asks discovery again
		// for on each miss, an object of the kind would fail with "no
		// matches for kind".
		gk, versions := crdKind(crd)
		if gk.Kind == "" || len(versions) == 0 {
			continue
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, establishTimeout, true, func(context.Context) (bool, error) {
			_, err := c.client.RESTMapper().RESTMapping(gk, versions...)
			return err == nil, nil
		})
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("not waiting for the CRD's kind to be discovered", "crd", ch.Item.id.Name, "timeout", establishTimeout.String(), "error", err.Error())
		}
	}
	if m, ok := r.Mapper.(apimeta.ResettableRESTMapper); ok && waited && !c.remote {
		m.Reset()
	}
}

// crdKind is the group and kind a CRD defines, and the versions it
// serves.
func crdKind(crd *unstructured.Unstructured) (schema.GroupKind, []string) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	list, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var versions []string
	for _, v := range list {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		name, _, _ := unstructured.NestedString(m, "name")
		served, _, _ := unstructured.NestedBool(m, "served")
		if name != "" && served {
			versions = append(versions, name)
		}
	}
	return schema.GroupKind{Group: group, Kind: kind}, versions
}

// waveWait returns what keeps the waves after wave n from starting: its
// objects (changes) that are not Current; nil when every one is.
func (r *Reconciler) waveWait(ctx context.Context, c *cluster, checker *health.Checker, n int, rest []engine.Wave, changes []Change) *waveWait {
	var pending []objectHealth
	for _, ch := range changes {
		if !ch.ours() {
			continue
		}
		if res := judge(ctx, c, checker, ch); res.Status != health.Current {
			pending = append(pending, objectHealth{id: ch.Item.id, Result: res})
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return &waveWait{wave: n, next: rest[0].N, pending: pending}
}

// judge is the health of one of our objects: as its apply returned it,
// else as the managed cache holds it (the API server, for a remote
// cluster, which has no cache). A sharded replica's cache holds only the
// objects carrying its shard label: one it does not hold is read from the
// API server, not taken as gone (it may carry the label of the replica
// its ManifestSync moved from).
func judge(ctx context.Context, c *cluster, checker *health.Checker, ch Change) health.Result {
	if ch.health != nil {
		return *ch.health
	}
	gvk := ch.Item.gvk()
	reader := c.managed
	if c.remote {
		reader = c.live
	}
	needs := checker.NeedsObject(gvk)
	if !needs {
		// Its metadata tells all: it exists, or is being deleted.
		if m, found, ok := readCachedMeta(ctx, reader, gvk, objectKey(ch.Item.id)); ok && (found || c.shard == "") {
			return health.CheckPresence(found, found && m.deletion != nil)
		}
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	err := readObject(ctx, reader, objectKey(ch.Item.id), obj, needs)
	if err != nil && (!apierrors.IsNotFound(err) || c.shard != "") && !c.remote {
		// Not cached (a kind the operator may not watch, or whose cache
		// has not synced), or not in a sharded replica's cache: the API
		// server tells.
		err = readObject(ctx, c.live, objectKey(ch.Item.id), obj, needs)
	}
	switch {
	case apierrors.IsNotFound(err):
		return checker.Check(nil)
	case err != nil:
		return health.Result{Status: health.Unknown, Message: fmt.Sprintf("reading it: %v", err)}
	}
	return checker.Check(obj)
}

// readObject reads the object at key into obj, of its kind: whole, or only
// its metadata.
func readObject(ctx context.Context, reader client.Reader, key client.ObjectKey, obj *unstructured.Unstructured, whole bool) error {
	if whole {
		return reader.Get(ctx, key, obj)
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(obj.GroupVersionKind())
	if err := reader.Get(ctx, key, meta); err != nil {
		return err
	}
	obj.SetName(meta.Name)
	obj.SetNamespace(meta.Namespace)
	obj.SetDeletionTimestamp(meta.DeletionTimestamp)
	return nil
}

// judgeTarget judges the health of the target's objects that are ours,
// and counts those of the waves it did not apply as in progress. A remote
// target that was healthy and is steady is not read again: its objects
// are not watched, and each read would cost a request at every resync.
func (r *Reconciler) judgeTarget(ctx context.Context, checker *health.Checker, o *targetOutcome) {
	if o.cluster == nil || o.record == nil {
		return
	}
	reuse := o.steady && o.cluster.remote && o.record.healthy
	add := func(id v1alpha1.ObjectID, r health.Result) {
		if r.Status == health.Current {
			o.current++
			return
		}
		o.health = append(o.health, objectHealth{id: id, Result: r})
	}
	defer func() { o.record.healthy = len(o.health) == 0 }()
	if !made(o.target) && len(o.changes) == 0 {
		// Steady, its objects not made: the record names each, and
		// which are ours.
		for _, a := range o.record.objects {
			switch {
			case a.item.missing:
				add(a.item.id, checker.Check(nil))
			case a.resourceVersion != "" && reuse:
				add(a.item.id, health.Result{Status: health.Current})
			case a.resourceVersion != "":
				add(a.item.id, judge(ctx, o.cluster, checker, Change{Item: a.item, Action: ActionUnchanged}))
			}
		}
		return
	}
	ours := map[v1alpha1.ObjectID]Change{}
	missing := map[v1alpha1.ObjectID]bool{}
	for _, a := range o.record.objects {
		switch {
		case a.item.missing:
			missing[a.item.id] = true
		case a.resourceVersion != "":
			ours[a.item.id] = Change{Item: a.item, Action: ActionUnchanged}
		}
	}
	applied := map[v1alpha1.ObjectID]bool{}
	for _, ch := range o.changes {
		applied[ch.Item.id] = true
		if ch.ours() {
			ours[ch.Item.id] = ch
		}
	}
	for id := range objectIDs(o.target, o.record) {
		ch, ok := ours[id]
		switch {
		case missing[id]:
			add(id, checker.Check(nil))
		case ok && reuse:
			add(id, health.Result{Status: health.Current})
		case ok:
			add(id, judge(ctx, o.cluster, checker, ch))
		case o.waiting != nil && !applied[id]:
			add(id, health.Result{Status: health.InProgress,
				Message: fmt.Sprintf("not applied: wave %d is not Current", o.waiting.wave)})
		}
	}
}

// healthTimeout is spec.timeout.
func healthTimeout(ms *v1alpha1.ManifestSync) time.Duration {
	if ms.Spec.Timeout != nil && ms.Spec.Timeout.Duration > 0 {
		return ms.Spec.Timeout.Duration
	}
	return defaultHealthTimeout
}

// healthVerdict is the health of a sync's targets taken together.
type healthVerdict struct {
	// failing are the objects that Failed or were not Current within
	// spec.timeout; pending those that may still be.
	failing, pending []objectHealth
	// unjudged counts the targets whose health could not be judged (they
	// failed before anything was applied).
	unjudged int
	// recheck is when the first pending target times out; zero when
	// none is pending.
	recheck time.Time
}

// add returns the health of one target's row, adding its objects to the
// verdict.
func (v *healthVerdict) add(o *targetOutcome, timeout time.Duration, now time.Time) v1alpha1.Health {
	if o.record == nil || o.cluster == nil {
		v.unjudged++
		return v1alpha1.HealthUnknown
	}
	results := make([]health.Result, len(o.health))
	for i, h := range o.health {
		results[i] = h.Result
	}
	agg := health.Aggregate(results)
	if agg == v1alpha1.HealthHealthy {
		return agg
	}
	deadline := o.record.since.Add(timeout)
	late := !now.Before(deadline)
	for _, h := range o.health {
		switch {
		case h.Status == health.Current:
		case h.Status == health.Failed || late:
			v.failing = append(v.failing, h)
		default:
			v.pending = append(v.pending, h)
		}
	}
	if late {
		return v1alpha1.HealthDegraded
	}
	if agg != v1alpha1.HealthDegraded && (v.recheck.IsZero() || deadline.Before(v.recheck)) {
		v.recheck = deadline
	}
	return agg
}

// condition is the Healthy condition's status, reason and message.
func (v *healthVerdict) condition() (metav1.ConditionStatus, string, string) {
	switch {
	case len(v.failing) > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonHealthCheckFailed, "not Current: " + listHealth(v.failing, true)
	case len(v.pending) > 0:
		return metav1.ConditionFalse, v1alpha1.ReasonProgressing, "waiting for " + listHealth(v.pending, false)
	case v.unjudged > 0:
		return metav1.ConditionUnknown, string(v1alpha1.HealthUnknown), plural.Count(v.unjudged, "target") + " not applied"
	}
	return metav1.ConditionTrue, string(v1alpha1.HealthHealthy), "every object is Current"
}

// listHealth names up to five objects, with their own message when
// messages is set, and how many more there are. Objects in progress are
// named without it: their messages change at every step of a rollout
// ("Available: 1/3"), and each change would be a status write.
func listHealth(hs []objectHealth, messages bool) string {
	const shown = 5
	parts := make([]string, 0, shown)
	for _, h := range hs[:min(len(hs), shown)] {
		if messages {
			parts = append(parts, h.String())
		} else {
			parts = append(parts, h.id.String())
		}
	}
	sep := ", "
	if messages {
		sep = "; "
	}
	out := strings.Join(parts, sep)
	if n := len(hs) - shown; n > 0 {
		out += fmt.Sprintf("%sand %d more", sep, n)
	}
	return out
}
