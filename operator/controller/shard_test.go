package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// shardedOperator runs, until the test ends, a replica of `engine
// operator --shards auto` on the second API server, as cmd/engine wires
// one: its ManifestSync cache selects shard.OwnerLabel=id and its
// reconciler has ShardID id. The sharder, Leases and drain are
// operator/shard's (tested there): here a ManifestSync moves by its
// label being set, as the sharder sets it.
func shardedOperator(t *testing.T, id string, opts ...func(*Options)) *Reconciler {
	t.Helper()
	skip := true
	probe, err := NewAPIServerProbe(remoteEnv.Config)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(remoteEnv.Config, ctrl.Options{
		Scheme:                 remoteEnv.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), NewInformer: probe.NewInformer,
			ByObject: map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Label: shard.OwnerSelector(id)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Options: Options{
		ShardID: id, TrustedNamespaces: []string{"*"}, Evaluator: evaluators, APIServer: probe,
		RetryMin: 100 * time.Millisecond, RetryMax: 2 * time.Second,
	}}
	for _, o := range opts {
		o(&r.Options)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	stop, err := testenv.StartManager(ctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

// moveSync labels ms (on the second API server) with replica id, as the
// sharder moves a ManifestSync.
func moveSync(t *testing.T, ms *v1alpha1.ManifestSync, id string) {
	t.Helper()
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		cur.Labels[shard.OwnerLabel] = id
		return remoteEnv.Client.Update(context.Background(), cur)
	})
}

// cachedConfigMap reads a ConfigMap's metadata from r's cache of managed
// objects.
func cachedConfigMap(r *Reconciler, ns, name string) error {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return r.managed.Get(context.Background(), keyOf(ns, name), meta)
}

// Sharded replicas: every object a replica applies carries its shard
// label, and its cache of managed objects holds none of another
// replica's. A ManifestSync moved from replica a to b has every object
// applied again by b with b's label (one write each), the object its
// output dropped in the same move pruned although a's label is still on
// it, nothing else deleted or recreated, and b's resyncs then write
// nothing. An object relabelled behind b's back (another replica's apply)
// is applied again, not taken for drift; a ManifestSync deleted while
// its objects carry the old replica's label has them orphaned all the
// same.
//
// What a hostile user gets: nothing new. Labelling an object with
// another replica's ID only moves it out of one replica's cache into
// another's (shard labels are not trusted to tell whose an object is: the
// owner label still does, and the write guards are unchanged), and the
// owner reads it from the API server and labels it back at its next sync.
func TestShardedReplicas(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := remoteEnv.Client
	ra := shardedOperator(t, "a")
	rb := shardedOperator(t, "b")
	ns := remoteEnv.Namespace(t, nil)

	ms := newSync(ns, "moves", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["c0", "c1", "c2"]}`),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour}, // no resync but ours
	})
	ms.Labels = map[string]string{shard.OwnerLabel: "a"}
	remoteEnv.CreateSync(t, ms, timeout)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, timeout)
	labelled := func(name, id string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{}
		eventually(t, timeout, func() error {
			if err := c.Get(ctx, keyOf(ns, name), cm); err != nil {
				return err
			}
			if cm.Labels[OwnerLabel] != ownerValue(ms) || cm.Labels[ShardLabel] != id {
				return fmt.Errorf("ConfigMap %s: labels %v, want the owner's and %s=%s", name, cm.Labels, ShardLabel, id)
			}
			return nil
		})
		return cm
	}
	before := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"c0", "c1", "c2"} {
		before[name] = labelled(name, "a")
	}

	// a's cache holds its own objects, and none of b's: one of b, then
	// one of a, are created; once a's cache shows the second it would
	// show the first.
	other := func(name, id string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{OwnerLabel: ns + ".elsewhere", ShardLabel: id}}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	other("of-b", "b")
	other("of-a", "a")
	eventually(t, timeout, func() error { return cachedConfigMap(ra, ns, "of-a") })
	if err := cachedConfigMap(ra, ns, "of-b"); !apierrors.IsNotFound(err) {
		t.Errorf("a's cache read b's object: %v, want not found", err)
	}
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := ra.watches.managedCache.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 4 {
		t.Errorf("a's cache holds %d ConfigMaps, want its own 4", len(list.Items))
	}
	for _, item := range list.Items {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, keyOf(item.Namespace, item.Name), cm); err != nil {
			t.Fatal(err)
		}
		if cm.Labels[ShardLabel] != "a" {
			t.Errorf("a's cache holds ConfigMap %s/%s, labelled %v", item.Namespace, item.Name, cm.Labels)
		}
	}

	// The move, and c2 leaves the output in the same change.
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		cur.Labels[shard.OwnerLabel] = "b"
		cur.Spec.Params = params(`{"names": ["c0", "c1"]}`)
		return c.Update(ctx, cur)
	})
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, timeout)
	after := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"c0", "c1"} {
		after[name] = labelled(name, "b")
		if after[name].UID != before[name].UID {
			t.Errorf("ConfigMap %s was recreated", name)
		}
	}
	eventually(t, timeout, func() error {
		return remoteEnv.Gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c2"}})
	})
	for _, name := range []string{"of-a", "of-b"} {
		if err := c.Get(ctx, keyOf(ns, name), &corev1.ConfigMap{}); err != nil {
			t.Errorf("ConfigMap %s, of no ManifestSync here: %v", name, err)
		}
	}
	if entries := entriesOf(t, got); len(entries) != 2 {
		t.Errorf("inventory %+v, want c0 and c1", entries)
	}
	eventually(t, timeout, func() error { return cachedConfigMap(rb, ns, "c0") })
	eventually(t, timeout, func() error {
		if err := cachedConfigMap(ra, ns, "c0"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("a's cache still reads c0: %v", err)
		}
		return nil
	})

	// b's resync writes nothing.
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	if _, err := rb.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	for name, was := range after {
		if now := labelled(name, "b"); now.ResourceVersion != was.ResourceVersion {
			t.Errorf("b's resync wrote ConfigMap %s", name)
		}
	}

	// Another replica's apply of c0 (its label, the same field manager and
	// fields): b's record of c0 outlived it; b applies c0 again, and
	// reports no drift.
	applied := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": ns, "name": "c0",
			"labels":      map[string]any{OwnerLabel: ownerValue(ms), ShardLabel: "z"},
			"annotations": map[string]any{DigestAnnotation: after["c0"].Annotations[DigestAnnotation]}},
		"data": map[string]any{"target": after["c0"].Data["target"]},
	}}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	relabelled := labelled("c0", "b") // b's cache lost it: its watch woke b
	if relabelled.ResourceVersion == after["c0"].ResourceVersion {
		t.Error("c0 was not written")
	}
	got = remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, timeout)
	for _, row := range got.Status.Targets {
		if row.Message != "" {
			t.Errorf("target %s: %q, want no drift", row.Name, row.Message)
		}
	}
	if n := recordedDrift(t, got); n > 0 {
		t.Errorf("%d DriftDetected events, want none", n)
	}

	// A hook carries the label too, so that a's cache holds it and its
	// changes wake its run.
	hooked := newSync(ns, "hooked", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: pre\n  annotations: {argocd.argoproj.io/hook: PreSync}\n"),
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Hour},
	})
	hooked.Labels = map[string]string{shard.OwnerLabel: "a"}
	remoteEnv.CreateSync(t, hooked, timeout)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(hooked), v1alpha1.ReasonSynced, timeout)
	pre := &corev1.ConfigMap{}
	if err := c.Get(ctx, keyOf(ns, "pre"), pre); err != nil || pre.Labels[HookLabel] == "" || pre.Labels[ShardLabel] != "a" {
		t.Errorf("hook: labels %v, %v; want a hook of shard a", pre.Labels, err)
	}
	eventually(t, timeout, func() error { return cachedConfigMap(ra, ns, "pre") })

	// Deleted while its objects carry a's label, then moved to b: b
	// orphans them.
	leaves := newSync(ns, "leaves", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["o0"]}`),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
		Policy:    v1alpha1.Policy{Deletion: v1alpha1.DeletionOrphan},
	})
	leaves.Labels = map[string]string{shard.OwnerLabel: "a"}
	remoteEnv.CreateSync(t, leaves, timeout)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(leaves), v1alpha1.ReasonSynced, timeout)
	ms = leaves // labelled checks its owner label
	labelled("o0", "a")
	moveSync(t, leaves, "nobody")
	if err := c.Delete(ctx, leaves); err != nil {
		t.Fatal(err)
	}
	moveSync(t, leaves, "b")
	eventually(t, timeout, func() error { return remoteEnv.Gone(leaves) })
	o0 := &corev1.ConfigMap{}
	if err := c.Get(ctx, keyOf(ns, "o0"), o0); err != nil {
		t.Fatalf("orphaned ConfigMap o0: %v", err)
	}
	if _, ok := o0.Labels[OwnerLabel]; ok {
		t.Errorf("orphaned ConfigMap o0 is labelled %v", o0.Labels)
	}
	if _, ok := o0.Labels[ShardLabel]; ok {
		t.Errorf("orphaned ConfigMap o0 is labelled %v", o0.Labels)
	}
}

// recordedDrift counts the DriftDetected events of ms on the second API
// server.
func recordedDrift(t *testing.T, ms *v1alpha1.ManifestSync) int {
	t.Helper()
	var list eventsv1.EventList
	if err := remoteEnv.Client.List(context.Background(), &list, client.InNamespace(ms.Namespace)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Name == ms.Name && e.Reason == EventDriftDetected {
			n++
		}
	}
	return n
}

// An operator without sharding writes no shard label, and its resync
// writes nothing.
func TestUnshardedWritesNoShardLabel(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	ms := newSync(ns, "unsharded", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["u0"]}`),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	ready(t, ms)
	cm := configMapWith(t, timeout, ms, ns, "u0", "target", "t0")
	if v, ok := cm.Labels[ShardLabel]; ok {
		t.Errorf("ConfigMap u0 has %s=%q", ShardLabel, v)
	}
	if _, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)}); err != nil {
		t.Fatal(err)
	}
	if now := mustConfigMap(t, ns, "u0"); now.ResourceVersion != cm.ResourceVersion {
		t.Error("the resync wrote ConfigMap u0")
	}
}

// A fenced replica writes to no remote cluster either: the transport of
// its remote clients passes through its Member's guard
// (Options.RemoteTransport), which refuses every write of a Member whose
// Lease was never renewed, as it refuses those of a Member past its
// fence. The ManifestSync's remote target fails, saying so, and nothing
// reaches the remote cluster (the first API server here); reads pass.
func TestFencedReplicaWritesNoRemoteCluster(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	fenced := &shard.Member{ID: "g"} // never run: no renewal, no write
	shardedOperator(t, "g", func(o *Options) { o.RemoteTransport = fenced.Guard })
	ns := remoteEnv.Namespace(t, nil)
	far := env.Namespace(t, nil)
	kc, err := env.Kubeconfig("admin-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "far"}, Data: map[string][]byte{"value": kc}}
	if err := remoteEnv.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ms := newSync(ns, "far", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["r0"]}`),
		Targets: []v1alpha1.Target{{Name: "far", Namespace: far,
			Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "far"}}}},
		Interval: &metav1.Duration{Duration: time.Hour},
	})
	ms.Labels = map[string]string{shard.OwnerLabel: "g"}
	remoteEnv.CreateSync(t, ms, timeout)
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonApplyFailed, timeout)
	msg := condition(got, v1alpha1.ConditionReady).Message
	for _, row := range got.Status.Targets {
		msg += " | " + row.Message
	}
	t.Logf("status: %s", msg)
	if !strings.Contains(msg, "fenced") {
		t.Errorf("status says %q, want the target fenced", msg)
	}
	if err := env.Client.Get(ctx, keyOf(far, "r0"), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap r0 in the remote cluster: %v, want none", err)
	}
}

// Dependencies across replicas: app, replica a's, depends on base,
// replica b's, which a's cache of ManifestSyncs does not hold. a reads
// base's readiness (not "not found"), and base turning Ready wakes app at
// once (its interval is an hour: only base's event, seen by a's
// dependency view, can wake it). A cycle whose two ManifestSyncs are on
// two replicas is found on both.
//
// What a hostile user gets: nothing of another tenant's ManifestSync
// beyond what one replica already showed (the view keeps the Ready
// condition's status and reason, never its message; the tenancy
// lockdown still refuses other namespaces).
func TestShardedDependsOn(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ra := shardedOperator(t, "a")
	shardedOperator(t, "b")
	ns := remoteEnv.Namespace(t, nil)
	owned := func(ms *v1alpha1.ManifestSync, id string) *v1alpha1.ManifestSync {
		ms.Labels = map[string]string{shard.OwnerLabel: id}
		return ms
	}
	base := owned(namedSync(ns, "base", ns), "b")
	base.Spec.Suspend = true
	app := owned(namedSync(ns, "app", ns, "base"), "a")
	app.Spec.Interval = &metav1.Duration{Duration: time.Hour}
	x := owned(namedSync(ns, "x", ns, "y"), "a")
	y := owned(namedSync(ns, "y", ns, "x"), "b")
	for _, ms := range []*v1alpha1.ManifestSync{base, app, x, y} {
		if err := remoteEnv.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	readyIs := func(ms *v1alpha1.ManifestSync, reason, msg string) {
		t.Helper()
		eventually(t, timeout, func() error {
			got := &v1alpha1.ManifestSync{}
			if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
				return err
			}
			c := condition(got, v1alpha1.ConditionReady)
			if c.Reason != reason || (msg != "" && c.Message != msg) || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("%s: Ready %s (%s): %q; want %s: %q", ms.Name, c.Status, c.Reason, c.Message, reason, msg)
			}
			return nil
		})
	}
	readyIs(app, v1alpha1.ReasonDependencyNotReady, "ManifestSync "+ns+"/base is not Ready: not reconciled yet")
	readyIs(x, v1alpha1.ReasonDependencyCycle, "dependsOn cycle: "+ns+"/x -> "+ns+"/y -> "+ns+"/x")
	readyIs(y, v1alpha1.ReasonDependencyCycle, "dependsOn cycle: "+ns+"/y -> "+ns+"/x -> "+ns+"/y")
	if err := ra.Client.Get(ctx, client.ObjectKeyFromObject(base), &v1alpha1.ManifestSync{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a's cache reads b's ManifestSync: %v, want not found", err)
	}

	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(base), cur); err != nil {
			return err
		}
		cur.Spec.Suspend = false
		return remoteEnv.Client.Update(ctx, cur)
	})
	readyIs(base, v1alpha1.ReasonSynced, "")
	start := time.Now()
	readyIs(app, v1alpha1.ReasonSynced, "")
	if took := time.Since(start); took > wakeLimit {
		t.Errorf("app synced %s after base was Ready, want its event to wake it within %s", took, wakeLimit)
	}
	if err := remoteEnv.Client.Get(ctx, keyOf(ns, "app"), &corev1.ConfigMap{}); err != nil {
		t.Errorf("app's ConfigMap: %v", err)
	}
}

// The watches of sources follow their ManifestSync's share: a
// ManifestSync reading the ConfigMap src and an object set of Secrets
// moves from replica a to b; a's sweep stops its watches of both (and
// b's keeps b's), a change of src then wakes b (the interval is an hour),
// and a move back starts a's watches again, which wake a in turn. A watch
// used a moment ago is kept, whether or not a ManifestSync of the cache
// names it.
func TestShardedWatchesFollowTheShare(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := remoteEnv.Client
	ra := shardedOperator(t, "a")
	rb := shardedOperator(t, "b")
	ns := remoteEnv.Namespace(t, nil)
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "src"}, Data: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}
	ms := newSync(ns, "reads", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src"}},
			{Name: "set", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"set": "x"}}}},
		},
		Transform: inline(`
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"v": ctx.sources["src"].object["data"]["v"]}}]
`),
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Hour},
	})
	ms.Labels = map[string]string{shard.OwnerLabel: "a"}
	remoteEnv.CreateSync(t, ms, timeout)
	key := watchKey{gvk: corev1.SchemeGroupVersion.WithKind("ConfigMap"), namespace: ns, purpose: watchSources}
	cfgHas := func(v string) {
		t.Helper()
		eventually(t, timeout, func() error {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, keyOf(ns, "cfg"), cm); err != nil {
				return err
			}
			if cm.Data["v"] != v {
				return fmt.Errorf("cfg holds %q, want %q", cm.Data["v"], v)
			}
			return nil
		})
	}
	setSrc := func(v string) {
		t.Helper()
		eventually(t, timeout, func() error {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, keyOf(ns, "src"), cm); err != nil {
				return err
			}
			cm.Data["v"] = v
			return c.Update(ctx, cm)
		})
	}
	setKey := setWatchKey{setCacheKey: setCacheKey{namespace: ns, selector: "set=x"}, gvk: corev1.SchemeGroupVersion.WithKind("Secret")}
	// watching says whether r watches both the source and the object set
	// (notWatching: neither).
	watching := func(r *Reconciler) bool {
		_, src := r.watches.watching(key)
		_, set := r.sets.watching(setKey)
		return src && set
	}
	notWatching := func(r *Reconciler) bool {
		_, src := r.watches.watching(key)
		_, set := r.sets.watching(setKey)
		return !src && !set
	}
	cfgHas("1")
	if !watching(ra) {
		t.Fatal("a does not watch the ConfigMaps of the source's namespace")
	}
	if n := ra.sweepWatches(ctx, time.Now().Add(2*watchIdle)); n != 0 || !watching(ra) {
		t.Fatalf("a's sweep stopped %d watches while its ManifestSync reads the source", n)
	}

	moveSync(t, ms, "b")
	eventually(t, timeout, func() error {
		if !watching(rb) {
			return fmt.Errorf("b does not watch the source yet")
		}
		return nil
	})
	eventually(t, timeout, func() error {
		if err := ra.Client.Get(ctx, client.ObjectKeyFromObject(ms), &v1alpha1.ManifestSync{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("a's cache still holds the ManifestSync: %v", err)
		}
		return nil
	})
	if n := ra.sweepWatches(ctx, time.Now()); n != 0 || !watching(ra) {
		t.Errorf("a's sweep stopped %d watches used a moment ago, want them kept for %s", n, watchIdle)
	}
	if n := ra.sweepWatches(ctx, time.Now().Add(2*watchIdle)); n != 2 || !notWatching(ra) {
		t.Errorf("a's sweep stopped %d watches, want its watches of the moved source's ConfigMaps and object set's Secrets", n)
	}
	if n := rb.sweepWatches(ctx, time.Now().Add(2*watchIdle)); n != 0 || !watching(rb) {
		t.Errorf("b's sweep stopped %d watches, want none: its ManifestSync reads the source", n)
	}
	setSrc("2")
	cfgHas("2")

	moveSync(t, ms, "a")
	eventually(t, timeout, func() error {
		if !watching(ra) {
			return fmt.Errorf("a does not watch the source again")
		}
		return nil
	})
	cfgHas("2")
	setSrc("3")
	cfgHas("3")
}
