package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// An operator restarted over 1,000 synced objects, nothing changed, makes
// no write, as counted by the API server: it knows from the inventory and
// the objects' digests and managed fields that they are as it left them.
func TestRestartMakesNoWrites(t *testing.T) {
	env.Need(t)
	const targetCount, perTarget = 10, 100
	ctx := context.Background()
	home := env.Namespace(t, nil)
	var nss, names []string
	for range targetCount {
		nss = append(nss, env.Namespace(t, nil))
	}
	for i := range perTarget {
		names = append(names, fmt.Sprintf("c%03d", i))
	}
	p, err := json.Marshal(map[string]any{"names": names})
	if err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "restart", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(string(p)),
		Targets:   targets(nss...),
	})
	start := time.Now()
	env.CreateSync(t, ms, 2*time.Minute)
	synced := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Minute)
	if n := len(entriesOf(t, synced)); n != targetCount*perTarget {
		t.Fatalf("inventory has %d objects, want %d", n, targetCount*perTarget)
	}
	if len(synced.Status.InventoryGzip) == 0 {
		t.Fatal("the inventory was not gzipped: the restart would not read the gzipped form")
	}
	t.Logf("first sync of %d objects: %v", targetCount*perTarget, time.Since(start).Round(time.Millisecond))
	quiet(t)

	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The restart: a new manager and reconciler, with empty caches and
	// nothing remembered.
	restarted := time.Now()
	mctx, cancel := context.WithCancel(ctx)
	mgr, fresh, err := newOperator(mctx, env)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the restarted manager stopped with: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		t.Fatal("the restarted manager's cache did not sync")
	}
	res, err := fresh.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)})
	if err != nil || res.RequeueAfter != defaultInterval {
		t.Fatalf("the restarted operator's sync: %+v, %v", res, err)
	}
	ready := time.Since(restarted)
	quiet(t)
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	writes := d.Writes()
	reads := d.Count(func(r testenv.Request) bool { return !r.Write() && !r.Housekeeping() })
	t.Logf("restart over %d objects: %v writes, %v reads, Ready (synced, nothing applied) %v after the start",
		targetCount*perTarget, writes, reads, ready.Round(time.Millisecond))
	if writes != 0 {
		t.Errorf("the restart made %v writes, want 0: %v", writes, d)
	}
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	if c := condition(got, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonSynced {
		t.Errorf("Ready %+v", c)
	}
}

// A restarted operator finds what drifted while it was away: an object
// whose fields we own were changed is corrected, the others are not
// written.
func TestRestartFindsDriftWhileAway(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "away", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["edited", "untouched"]}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	ready(t, ms)
	// Away: suspended, then forgotten, as a restart forgets.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = true })
	waitGauge(t, suspendedGauge.WithLabelValues(home, "away"), 1)
	cm := mustConfigMap(t, ns, "edited")
	cm.Data["target"] = "changed while away"
	if err := env.Client.Update(ctx, cm, client.FieldOwner("intruder")); err != nil {
		t.Fatal(err)
	}
	untouched := mustConfigMap(t, ns, "untouched").ResourceVersion
	quiet(t)
	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reconciler.states.forget(client.ObjectKeyFromObject(ms))
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = false })

	configMapWith(t, timeout, ms, ns, "edited", "target", "t0")
	waitEvent(t, ms, EventDriftCorrected, "ConfigMap "+ns+"/edited (changed)")
	ready(t, ms)
	quiet(t)
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if n := d.Count(func(r testenv.Request) bool { return r.Write() && r.Resource == "configmaps" }); n != 1 {
		t.Errorf("%v writes of ConfigMaps, want the one correction: %v", n, d)
	}
	if rv := mustConfigMap(t, ns, "untouched").ResourceVersion; rv != untouched {
		t.Errorf("the untouched ConfigMap was rewritten")
	}
}
