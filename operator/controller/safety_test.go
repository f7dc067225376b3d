package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// A transform that turns empty prunes nothing unless spec.policy.allowEmpty
// says so: 30 copies stay, and the ManifestSync says why (issue 12, hole 3).
func TestEmptyOutputPrunesNothing(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	names := make([]string, 30)
	for i := range names {
		names[i] = fmt.Sprintf("%q", fmt.Sprintf("copy-%02d", i))
	}
	ms := newSync(home, "empty", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": [` + strings.Join(names, ", ") + `]}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	before := ready(t, ms)
	if n := len(entriesOf(t, before)); n != 30 {
		t.Fatalf("inventory has %d entries, want 30", n)
	}
	rvs := map[string]string{}
	for i := range names {
		name := fmt.Sprintf("copy-%02d", i)
		rvs[name] = mustConfigMap(t, ns, name).ResourceVersion
	}

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = inline("def main(ctx):\n    return []\n")
	})
	got := waitFor(t, ms, v1alpha1.ReasonEmptyOutput)
	c := condition(got, v1alpha1.ConditionReady)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, `target "t0": the evaluation returned no objects while 30 are in its inventory`) ||
		!strings.Contains(c.Message, "allowEmpty") {
		t.Errorf("Ready = %+v", c)
	}
	if c := condition(got, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonEmptyOutput {
		t.Errorf("Stalled = %+v", c)
	}
	if row := got.Status.Targets[0]; row.State != v1alpha1.TargetFailed || !strings.Contains(row.Message, "no objects") {
		t.Errorf("target row %+v", row)
	}
	if n := len(entriesOf(t, got)); n != 30 {
		t.Errorf("inventory has %d entries, want the 30 it had", n)
	}
	waitEvent(t, ms, EventEmptyOutput, "returned no objects")
	// Give a wrong prune the time to show.
	time.Sleep(300 * time.Millisecond)
	for name, rv := range rvs {
		if cm, err := getConfigMap(ns, name); err != nil || cm.ResourceVersion != rv {
			t.Errorf("%s/%s: %v, resourceVersion %s, was %s", ns, name, err, cm.ResourceVersion, rv)
		}
	}

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Policy.AllowEmpty = true })
	got = ready(t, ms)
	for name := range rvs {
		eventually(t, timeout, func() error {
			return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		})
	}
	if len(entriesOf(t, got)) != 0 || got.Status.Targets[0].State != v1alpha1.TargetSynced {
		t.Errorf("inventory %+v, rows %+v", entriesOf(t, got), got.Status.Targets)
	}
}

// warScript makes a ConfigMap of each name in ctx.params.names with data
// a = ctx.params.value.
const warScript = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}, "data": {"a": ctx.params["value"]}}
            for n in ctx.params["names"]]
`

// configMapApplies counts the server-side applies of ConfigMaps the API
// server served while do ran.
func configMapApplies(t testing.TB, do func()) float64 {
	t.Helper()
	before, err := env.Requests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	do()
	after, err := env.Requests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return after.Sub(before).Count(func(r testenv.Request) bool {
		return r.Verb == "APPLY" && r.Resource == "configmaps" && !r.DryRun
	})
}

// waitWriteWar waits until ms's Ready condition is a Conflict naming a
// write war on the object, and returns ms.
func waitWriteWar(t testing.TB, ms *v1alpha1.ManifestSync, object string) *v1alpha1.ManifestSync {
	t.Helper()
	got := &v1alpha1.ManifestSync{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		c := condition(got, v1alpha1.ConditionReady)
		if c.Reason != v1alpha1.ReasonConflict || !strings.Contains(c.Message, object+": write war") {
			return fmt.Errorf("Ready is %s (%s): %s", c.Status, c.Reason, c.Message)
		}
		return nil
	})
	return got
}

// Two ManifestSyncs that both take over one ConfigMap (policy Overwrite)
// with different data would rewrite it forever, each undoing the other;
// the war is stopped after a few writes and reported as a Conflict (issue
// 12, hole 2).
func TestWriteWarBetweenManifestSyncs(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	newWarring := func(name string) *v1alpha1.ManifestSync {
		return newSync(home, name, v1alpha1.ManifestSyncSpec{
			Transform: inline(warScript),
			Params:    params(`{"names": ["shared"], "value": "` + name + `"}`),
			Targets:   targets(ns),
			Policy:    v1alpha1.Policy{Resources: v1alpha1.PolicyOverwrite},
		})
	}
	a, b := newWarring("a"), newWarring("b")
	createSync(t, a)
	ready(t, a)

	object := "ConfigMap " + ns + "/shared"
	var warring *v1alpha1.ManifestSync
	n := configMapApplies(t, func() {
		createSync(t, b)
		// Whichever writes one time too many stops and says so.
		eventually(t, timeout, func() error {
			for _, ms := range []*v1alpha1.ManifestSync{a, b} {
				got := &v1alpha1.ManifestSync{}
				if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
					return err
				}
				if c := condition(got, v1alpha1.ConditionReady); c.Reason == v1alpha1.ReasonConflict && strings.Contains(c.Message, object+": write war") {
					warring = got
					return nil
				}
			}
			return errors.New("no ManifestSync reports the write war")
		})
		time.Sleep(2 * time.Second)
	})
	// Each writes the object at most 5 times (the limit) in a minute.
	if n > 12 {
		t.Errorf("the write war made %v applies of ConfigMaps, want at most 12", n)
	}
	t.Logf("%v applies until the war stopped", n)
	if n := configMapApplies(t, func() { time.Sleep(2 * time.Second) }); n != 0 {
		t.Errorf("the war goes on: %v applies in 2s", n)
	}
	row := warring.Status.Targets[0]
	if row.State != v1alpha1.TargetConflict || !strings.Contains(row.Message, object+": write war") {
		t.Errorf("target row %+v", row)
	}
	waitEvent(t, warring, EventConflict, object+": write war")
}

// Another controller that keeps reverting a field of ours: a single hand
// edit is corrected, a revert after every correction is a write war,
// stopped and reported while the ManifestSync's other objects keep
// syncing; a change of the desired object clears it.
func TestWriteWarWithAnotherWriter(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "reverted", v1alpha1.ManifestSyncSpec{
		Transform: inline(warScript),
		Params:    params(`{"names": ["fought", "calm"], "value": "ours"}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	ready(t, ms)

	edit := func(name, value string) error {
		cm, err := getConfigMap(ns, name)
		if err != nil {
			return err
		}
		cm.Data["a"] = value
		return env.Client.Update(ctx, cm, client.FieldOwner("reverter"))
	}
	// One hand edit is drift, corrected.
	if err := edit("fought", "hand"); err != nil {
		t.Fatal(err)
	}
	configMapWith(t, timeout, ms, ns, "fought", "a", "ours")
	waitEvent(t, ms, EventDriftCorrected, "ConfigMap "+ns+"/fought")

	// The reverter puts its value back whenever it is gone.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	revert := func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if cm, err := getConfigMap(ns, "fought"); err == nil && cm.Data["a"] != "theirs" {
				if err := edit("fought", "theirs"); err != nil && !apierrors.IsConflict(err) {
					t.Errorf("reverting: %v", err)
					return
				}
			}
		}
	}
	object := "ConfigMap " + ns + "/fought"
	var got *v1alpha1.ManifestSync
	n := configMapApplies(t, func() {
		wg.Go(revert)
		got = waitWriteWar(t, ms, object)
		// The other object still syncs: its drift is corrected.
		if err := edit("calm", "hand"); err != nil {
			t.Fatal(err)
		}
		configMapWith(t, timeout, ms, ns, "calm", "a", "ours")
		time.Sleep(time.Second)
	})
	close(stop)
	wg.Wait()
	// Created, corrected once by hand: 3 more writes make 5, the limit;
	// the correction of calm is one more.
	if n > 4 {
		t.Errorf("%v applies of ConfigMaps during the war, want at most 4", n)
	}
	t.Logf("%v applies during the war", n)
	if row := got.Status.Targets[0]; row.State != v1alpha1.TargetConflict || !strings.Contains(row.Message, object+": write war") {
		t.Errorf("target row %+v", row)
	}
	waitEvent(t, ms, EventConflict, object+": write war")
	if n := testutil.ToFloat64(writeWarsTotal.WithLabelValues(ms.Namespace, ms.Name, "t0")); n < 1 {
		t.Errorf("manifestsync_write_wars_total is %v", n)
	}
	// Retried when the window lets the object be written again (within
	// the default minute), not after a backoff.
	res, err := reconciler.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)})
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("a resync during the war: %+v, %v; want a requeue within the window", res, err)
	}

	// A new desired object is written at once.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Params = params(`{"names": ["fought", "calm"], "value": "new"}`)
	})
	ready(t, ms)
	configMapWith(t, timeout, ms, ns, "fought", "a", "new")
}
