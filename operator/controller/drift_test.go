package controller

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// resync reconciles ms n times, as the interval or a watch event would.
func resync(t testing.TB, ms *v1alpha1.ManifestSync, n int) {
	t.Helper()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for range n {
		if _, err := reconciler.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
}

// driftCounts are the drift metric's values of ms's target t0, by action.
func driftCounts(ms *v1alpha1.ManifestSync) map[string]float64 {
	out := map[string]float64{}
	for _, action := range []string{driftCorrected, driftReported, driftIgnored} {
		out[action] = testutil.ToFloat64(driftTotal.WithLabelValues(ms.Namespace, ms.Name, "t0", action))
	}
	return out
}

// ownedEntry is an inventory entry of an object we own without its digest
// of owned fields, which differs from object to object: an entry without
// one is returned as "missing fields", which matches no object's.
func ownedEntry(e v1alpha1.InventoryEntry) v1alpha1.InventoryEntry {
	if e.Fields == "" {
		e.ID += " (missing fields)"
	}
	e.Fields = ""
	return e
}

// Drift Report says that an object was changed, in the target's row, the
// inventory, an event and the metric; Ignore looks for no drift and says
// nothing. Neither corrects it.
func TestDriftIgnoreReportsNothing(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	for _, policy := range []v1alpha1.DriftPolicy{v1alpha1.DriftReport, v1alpha1.DriftIgnore} {
		t.Run(string(policy), func(t *testing.T) {
			home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
			ms := newSync(home, strings.ToLower(string(policy)), v1alpha1.ManifestSyncSpec{
				Transform: inline(namesScript),
				Params:    params(`{"names": ["one"]}`),
				Targets:   targets(ns),
				Policy:    v1alpha1.Policy{Drift: policy},
			})
			createSync(t, ms)
			ready(t, ms)
			cm := mustConfigMap(t, ns, "one")
			cm.Data["target"] = "edited"
			if err := env.Client.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
			report := policy == v1alpha1.DriftReport
			if report {
				waitEvent(t, ms, EventDriftDetected, "ConfigMap "+ns+"/one (changed)")
			}
			resync(t, ms, 3)
			quiet(t)

			got := &v1alpha1.ManifestSync{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
				t.Fatal(err)
			}
			if msg := got.Status.Targets[0].Message; strings.Contains(msg, "drifted") != report {
				t.Errorf("target message %q under drift %s", msg, policy)
			}
			if inv := entriesOf(t, got); len(inv) != 1 || inv[0].Drifted != report || inv[0].Missing {
				t.Errorf("inventory %+v under drift %s", inv, policy)
			}
			if c := condition(got, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonSynced {
				t.Errorf("Ready %+v", c)
			}
			want := map[string]float64{driftCorrected: 0, driftReported: 0, driftIgnored: 0}
			if report {
				want[driftReported] = 1
			}
			if counts := driftCounts(ms); fmt.Sprint(counts) != fmt.Sprint(want) {
				t.Errorf("drift metric %v, want %v", counts, want)
			}
			wantEvents := 0
			if report {
				wantEvents = 1
			}
			if n := recorded.count(ms, EventDriftDetected); n != wantEvents {
				t.Errorf("%d DriftDetected events, want %d", n, wantEvents)
			}
			if n := recorded.count(ms, EventDriftCorrected); n != 0 {
				t.Errorf("%d DriftCorrected events", n)
			}
			if cm := mustConfigMap(t, ns, "one"); cm.Data["target"] != "edited" {
				t.Errorf("drift %s corrected the edit: %v", policy, cm.Data)
			}
		})
	}
}

// deploymentScript makes one Deployment, with params.replicas.
const deploymentScript = `
def main(ctx):
    labels = {"app": "web"}
    return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": ctx.params["replicas"], "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}}]
`

// Drift is a change of the fields we own: a status write to a managed
// Deployment, or another manager's write of fields we do not own, is not
// drift and costs no write; another manager changing a field we own is,
// and is corrected.
func TestDriftIsAChangeOfOwnedFields(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "owned-fields", v1alpha1.ManifestSyncSpec{
		Transform: inline(deploymentScript),
		Params:    params(`{"replicas": 1}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	ready(t, ms)
	quiet(t)
	deployment := func() *appsv1.Deployment {
		t.Helper()
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, keyOf(ns, "web"), d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// ourWrites are the operator's writes since before: every write but
	// the test's own ones (given).
	ourWrites := func(before testenv.Requests, own float64) testenv.Requests {
		t.Helper()
		quiet(t)
		after, err := env.Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before)
		if n := d.Writes(); n != own {
			t.Errorf("%v writes, want only the test's own %v: %v", n, own, d)
		}
		return d
	}
	requests := func() testenv.Requests {
		t.Helper()
		r, err := env.Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// A status write, through the status subresource, as the deployment
	// controller makes at every rollout.
	before := requests()
	d := deployment()
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas, d.Status.UpdatedReplicas = 1, 1
	if err := env.Client.Status().Update(ctx, d, client.FieldOwner("kube-controller-manager")); err != nil {
		t.Fatal(err)
	}
	resync(t, ms, 3)
	ourWrites(before, 1)
	if got := deployment(); got.ResourceVersion != d.ResourceVersion {
		t.Errorf("Deployment rewritten after a status write: resourceVersion %s -> %s", d.ResourceVersion, got.ResourceVersion)
	}
	// The record moved on to the status write's version; a resync that
	// finds nothing new keeps the record as it is, copying nothing.
	record := func() *targetRecord {
		st := reconciler.states.get(client.ObjectKeyFromObject(ms))
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.targets["t0"]
	}
	kept := record()
	if kept == nil || len(kept.objects) != 1 || kept.objects[0].resourceVersion != d.ResourceVersion {
		t.Fatalf("record after the status write: %+v, want version %s", kept, d.ResourceVersion)
	}
	resync(t, ms, 1)
	if record() != kept {
		t.Errorf("a steady resync replaced the target's record")
	}

	// Another manager's label, a field we do not own.
	before = requests()
	d = deployment()
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"team":"web"}}}`))
	if err := env.Client.Patch(ctx, d, patch, client.FieldOwner("labeller")); err != nil {
		t.Fatal(err)
	}
	resync(t, ms, 3)
	ourWrites(before, 1)
	if got := deployment(); got.ResourceVersion != d.ResourceVersion || got.Labels["team"] != "web" {
		t.Errorf("Deployment rewritten after another manager's label: resourceVersion %s -> %s, labels %v", d.ResourceVersion, got.ResourceVersion, got.Labels)
	}
	if counts := driftCounts(ms); counts[driftCorrected] != 0 {
		t.Errorf("drift metric %v after writes of fields not ours", counts)
	}
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	if inv := entriesOf(t, got); len(inv) != 1 || inv[0].Drifted || inv[0].Fields == "" {
		t.Errorf("inventory %+v", inv)
	}

	// Another manager scales it: spec.replicas is ours.
	d = deployment()
	three := int32(3)
	d.Spec.Replicas = &three
	if err := env.Client.Update(ctx, d, client.FieldOwner("intruder")); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ms, EventDriftCorrected, "Deployment "+ns+"/web (changed)")
	eventually(t, timeout, func() error {
		if r := *deployment().Spec.Replicas; r != 1 {
			return fmt.Errorf("replicas %d, want 1", r)
		}
		return nil
	})
	if counts := driftCounts(ms); counts[driftCorrected] != 1 {
		t.Errorf("drift metric %v, want 1 corrected", counts)
	}
	// The label we do not own stayed.
	if l := deployment().Labels["team"]; l != "web" {
		t.Errorf("label team %q", l)
	}
	time.Sleep(200 * time.Millisecond)
	if counts := driftCounts(ms); counts[driftCorrected] != 1 {
		t.Errorf("drift metric %v, want 1 corrected: a write war?", counts)
	}
}

// The digest of our owned fields changes with our apply entry's field
// set, our owner label and our digest annotation, and with nothing else:
// not another manager's entry, not our entry of a subresource, not the
// order the API server encodes the set in.
func TestOwnedFields(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Subresource: sub, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	object := func(owner string, entries ...metav1.ManagedFieldsEntry) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Labels: map[string]string{OwnerLabel: owner}, Annotations: map[string]string{DigestAnnotation: "sha256:1"}, ManagedFields: entries}
	}
	apply, update := metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	ours := entry(FieldManager, apply, "", `{"f:data":{"f:a":{},"f:b":{}}}`)
	base := ownedFields(object("p.ms", ours), FieldManager)
	if base == 0 {
		t.Fatal("no digest of an object we own fields of")
	}
	same := map[string]*metav1.ObjectMeta{
		"another manager's entry": object("p.ms", ours, entry("kubectl", update, "", `{"f:data":{"f:c":{}}}`)),
		"our status entry":        object("p.ms", ours, entry(FieldManager, apply, "status", `{"f:status":{}}`)),
		"another encoding":        object("p.ms", entry(FieldManager, apply, "", `{"f:data":{"f:b":{},"f:a":{}}}`)),
	}
	for what, obj := range same {
		if got := ownedFields(obj, FieldManager); got != base {
			t.Errorf("%s changed the digest", what)
		}
	}
	digest := object("p.ms", ours)
	digest.Annotations[DigestAnnotation] = "sha256:2"
	changed := map[string]*metav1.ObjectMeta{
		"a field we lost":        object("p.ms", entry(FieldManager, apply, "", `{"f:data":{"f:a":{}}}`)),
		"another owner":          object("p.other", ours),
		"another desired digest": digest,
	}
	for what, obj := range changed {
		if got := ownedFields(obj, FieldManager); got == base {
			t.Errorf("%s left the digest as it was", what)
		}
	}
	if got := ownedFields(object("p.ms", entry("kubectl", update, "", `{"f:data":{}}`)), FieldManager); got != 0 {
		t.Errorf("digest %q of an object we own no field of", got)
	}
}

// The managed cache keeps of each object the digest of our owned fields
// in place of its managed fields, and drift is judged alike from either.
// The digest's key is one the API server refuses, so that nobody can
// write an object that claims one.
func TestCacheKeepsOwnedFieldsDigest(t *testing.T) {
	apply := metav1.ManagedFieldsOperationApply
	deleted := metav1.Now()
	obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "web", Name: "cfg", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &deleted,
		Labels:      map[string]string{OwnerLabel: "p.ms", "app": "web"},
		Annotations: map[string]string{DigestAnnotation: "sha256:1", "team": "web"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: FieldManager, Operation: apply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:a":{}}}`)}},
			{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:b":{}}}`)}},
		},
	}}
	want := ownedFields(obj, FieldManager)
	transform := keepOwnFields(FieldManager)
	obj.APIVersion, obj.Kind = "v1", "ConfigMap"
	out, err := transform(obj.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*cachedMeta)
	// A reader of the cache gets a PartialObjectMetadata of its own.
	cached, ok := kept.DeepCopyObject().(*metav1.PartialObjectMetadata)
	if !ok {
		t.Fatalf("the cache reads as %T", kept.DeepCopyObject())
	}
	if cached.ManagedFields != nil {
		t.Errorf("the cache keeps %d managed fields entries", len(cached.ManagedFields))
	}
	if got := ownedFields(cached, FieldManager); got != want || want == 0 {
		t.Errorf("owned fields from the cache %q, from the object %q", got, want)
	}
	// Of the metadata, what the reconciler reads, and nothing else.
	wantMeta := metav1.ObjectMeta{Namespace: "web", Name: "cfg", ResourceVersion: "7", DeletionTimestamp: &deleted,
		Labels: map[string]string{OwnerLabel: "p.ms"}, Annotations: map[string]string{DigestAnnotation: "sha256:1", cachedFieldsKey: want.String()}}
	if !reflect.DeepEqual(cached.ObjectMeta, wantMeta) || cached.APIVersion != "v1" || cached.Kind != "ConfigMap" {
		t.Errorf("the cache keeps\n%+v\nwant\n%+v", cached, wantMeta)
	}
	// Its event handlers read it as a metav1.Object.
	var o metav1.Object = kept
	if o.GetName() != "cfg" || o.GetNamespace() != "web" || o.GetResourceVersion() != "7" || o.GetLabels()[OwnerLabel] != "p.ms" ||
		o.GetAnnotations()[DigestAnnotation] != "sha256:1" || !o.GetDeletionTimestamp().Equal(&deleted) || kept.GetObjectKind().GroupVersionKind().Kind != "ConfigMap" {
		t.Errorf("the cached object reads as %s/%s %s %v %v", o.GetNamespace(), o.GetName(), o.GetResourceVersion(), o.GetLabels(), o.GetAnnotations())
	}
	// A reader's copy is its own.
	cached.Labels[OwnerLabel] = "changed"
	cached.Annotations[DigestAnnotation] = "changed"
	if again := kept.DeepCopyObject().(*metav1.PartialObjectMetadata); !reflect.DeepEqual(again.ObjectMeta, wantMeta) {
		t.Errorf("a reader's change shows in the cache: %+v", again.ObjectMeta)
	}
	if again, _ := transform(kept); again != kept {
		t.Errorf("the transform applied to its own result changes it")
	}
	// Every object of one owner shares its label set.
	other := obj.DeepCopy()
	other.Name = "other"
	out2, _ := transform(other)
	if reflect.ValueOf(out2.(*cachedMeta).labels).Pointer() != reflect.ValueOf(kept.labels).Pointer() {
		t.Errorf("two objects of one owner have a label set each")
	}
	// ... and its namespace's string; a digest of ours is kept as its
	// sum and reads back the same; any other stays as it was written.
	if unsafe.StringData(out2.(*cachedMeta).namespace) != unsafe.StringData(kept.namespace) {
		t.Errorf("two objects of one namespace have a string each")
	}
	ours := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, digest := range []string{ours, strings.ToUpper(ours), ours[:70], "sha256:" + strings.Repeat("g", 64)} {
		d := obj.DeepCopy()
		d.Annotations[DigestAnnotation] = digest
		out, _ := transform(d)
		c := out.(*cachedMeta)
		if c.hasSHA256 != (digest == ours) || c.GetAnnotations()[DigestAnnotation] != digest || c.digest() != digest {
			t.Errorf("digest %q: kept as a sum %v, reads back %q", digest, c.hasSHA256, c.digest())
		}
	}
	// A whole object (a kind whose health needs its body) keeps it all
	// but the managed fields.
	whole := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "status": map[string]any{"replicas": int64(1)}}}
	whole.SetLabels(obj.Labels)
	whole.SetAnnotations(obj.Annotations)
	whole.SetManagedFields(obj.ManagedFields)
	out3, _ := transform(whole)
	if w := out3.(*unstructured.Unstructured); w.GetManagedFields() != nil || w.GetAnnotations()["team"] != "web" ||
		w.GetAnnotations()[cachedFieldsKey] != want.String() || w.Object["status"] == nil {
		t.Errorf("a whole object in the cache: %v", w.Object)
	}

	env.Need(t)
	ns := env.Namespace(t, nil)
	claim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "claim", Annotations: map[string]string{cachedFieldsKey: want.String()}}}
	if err := env.Client.Create(context.Background(), claim); !apierrors.IsInvalid(err) {
		t.Errorf("creating an object with annotation %q: %v, want it refused as invalid", cachedFieldsKey, err)
	}
}

// A target applied completely as it is now is checked for drift from its
// record and the managed cache, read without copies: the copies of a
// compact evaluation are not made again for it, and are made again only
// to correct one that drifted.
func TestSteadyTargetIsNotMadeAgain(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "tls"}, Data: map[string][]byte{"tls.crt": []byte("one")}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "steady", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}}},
		Targets: targets(ns),
	})
	createSync(t, ms)
	got := ready(t, ms)
	quiet(t)

	// The ManifestSync's state, held: its reconciles wait meanwhile.
	st := reconciler.states.get(client.ObjectKeyFromObject(ms))
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.eval == nil || st.eval.result == nil || len(st.eval.result.Targets) != 1 {
		t.Fatalf("no evaluation kept: %+v", st.eval)
	}
	res := st.eval.result
	target := res.Targets[0]
	rec := st.targets[target.ID()]
	if made(target) || target.Len() != 1 || !rec.complete(res.Revision, got.Generation, target) {
		t.Fatalf("target of %d objects, %d kept; record %+v", target.Len(), len(target.Objects), rec)
	}
	a := &applier{client: reconciler.Client, live: reconciler.APIReader, managed: reconciler.managed, owner: reconciler.Options.owner(got),
		manager: reconciler.Options.fieldManager(), policy: got.Spec.Policy.Resources, guard: reconciler.guard, health: st.checker(got)}
	out := reconciler.syncTarget(ctx, got, a, res.Revision, target, rec, nil)
	if out.err != nil || !out.steady || out.record != rec || made(out.target) {
		t.Fatalf("steady target: err %v, steady %v, record kept %v, objects made %v", out.err, out.steady, out.record == rec, made(out.target))
	}
	reconciler.judgeTarget(ctx, st.checker(got), out)
	if out.current != 1 || len(out.health) != 0 {
		t.Errorf("health judged from the record: %d Current, %+v", out.current, out.health)
	}

	// The cache's own entry, not a copy; none of an object it does not
	// hold; and no entry from a reader that is not the managed cache.
	secret := corev1.SchemeGroupVersion.WithKind("Secret")
	m, found, ok := readCachedMeta(ctx, reconciler.managed, secret, keyOf(ns, "tls"))
	if !ok || !found || m.resourceVersion != rec.objects[0].resourceVersion || m.fields != rec.objects[0].item.fields {
		t.Fatalf("cached copy: %+v, found %v, ok %v; record %+v", m, found, ok, rec.objects[0])
	}
	if again, _, _ := readCachedMeta(ctx, reconciler.managed, secret, keyOf(ns, "tls")); again != m {
		t.Errorf("two reads gave two entries")
	}
	if _, found, ok := readCachedMeta(ctx, reconciler.managed, secret, keyOf(ns, "other")); !ok || found {
		t.Errorf("an object the cache does not hold: found %v, ok %v", found, ok)
	}
	if _, _, ok := readCachedMeta(ctx, reconciler.APIReader, secret, keyOf(ns, "tls")); ok {
		t.Errorf("read the API server's reader as a cache")
	}

	// Deleted by someone else: made again, to be applied again.
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tls"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error {
		if _, found, _ := readCachedMeta(ctx, reconciler.managed, secret, keyOf(ns, "tls")); found {
			return fmt.Errorf("the cache still holds the deleted copy")
		}
		return nil
	})
	out = reconciler.syncTarget(ctx, got, a, res.Revision, target, rec, nil)
	if out.err != nil || !out.corrected || !made(out.target) || len(out.changes) != 1 || out.changes[0].Action != ActionCreated {
		t.Fatalf("deleted copy: err %v, corrected %v, objects made %v, changes %+v", out.err, out.corrected, made(out.target), out.changes)
	}
	copied := &corev1.Secret{}
	if err := env.Client.Get(ctx, keyOf(ns, "tls"), copied); err != nil || string(copied.Data["tls.crt"]) != "one" {
		t.Errorf("copy after the correction: %v, %q", err, copied.Data["tls.crt"])
	}
}
