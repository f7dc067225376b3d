package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// A transform that fails leaves every target as it was and says where it
// failed.
func TestEvalFailureTouchesNoTarget(t *testing.T) {
	env.Need(t)
	home, a, b := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "evalfail", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["one"]}`),
		Targets:   targets(a, b),
	})
	createSync(t, ms)
	before := ready(t, ms)
	waitGauge(t, readyGauge.WithLabelValues(home, "evalfail"), 1)
	rvs := map[string]string{}
	for _, ns := range []string{a, b} {
		rvs[ns] = mustConfigMap(t, ns, "one").ResourceVersion
	}

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = inline("def main(ctx):\n    names = ctx.params[\"names\"]\n    return [{\"metadata\": {\"name\": names + 1}}]\n")
		ms.Spec.Params = params(`{"names": ["one", "two"]}`)
	})
	got := waitFor(t, ms, v1alpha1.ReasonEvalFailed)
	waitGauge(t, readyGauge.WithLabelValues(home, "evalfail"), 0)
	msg := condition(got, v1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "<inline>:3:") {
		t.Errorf("message %q does not name the script's line", msg)
	}
	if c := condition(got, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v", c)
	}
	waitEvent(t, ms, EventSyncFailed, "<inline>:3:")
	// Give a wrongly applied change the time to show.
	time.Sleep(300 * time.Millisecond)
	for _, ns := range []string{a, b} {
		if cm := mustConfigMap(t, ns, "one"); cm.ResourceVersion != rvs[ns] {
			t.Errorf("%s/one changed", ns)
		}
		if _, err := getConfigMap(ns, "two"); err == nil {
			t.Errorf("%s/two was created", ns)
		}
	}
	if got.Status.LastAppliedRevision != before.Status.LastAppliedRevision {
		t.Error("lastAppliedRevision changed")
	}
	if got.Status.History[0].Result != v1alpha1.ReasonEvalFailed || got.Status.History[1].Result != v1alpha1.ReasonSynced {
		t.Errorf("history %+v", got.Status.History)
	}
	if len(entriesOf(t, got)) != 2 {
		t.Errorf("inventory changed: %+v", entriesOf(t, got))
	}
	// The rows say the evaluation failed; the condition says why once,
	// although both targets failed the same way.
	for _, row := range got.Status.Targets {
		if row.State != v1alpha1.TargetFailed || !strings.HasPrefix(row.Message, "evaluation failed: <inline>:3:") {
			t.Errorf("target row %+v", row)
		}
	}
	if n := strings.Count(msg, "<inline>:3:"); n != 1 || !strings.HasPrefix(msg, `targets "t0", "t1": <inline>:3:`) {
		t.Errorf("message %q has the error %d times, want once for both targets", msg, n)
	}
	if got.Status.TargetsSummary != "0/2" {
		t.Errorf("summary %q", got.Status.TargetsSummary)
	}
}

// An evaluation that fails differently per target lists each error once,
// with the targets it is of; a target that evaluated is not applied
// either, and its row says so.
func TestEvalFailureListsEachErrorOnce(t *testing.T) {
	env.Need(t)
	home := env.Namespace(t, nil)
	nss := []string{env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)}
	ms := newSync(home, "evalfail-each", v1alpha1.ManifestSyncSpec{
		Transform: inline(`
def main(ctx):
    if ctx.target.name in ("t0", "t2"):
        fail("shared failure")
    if ctx.target.name == "t1":
        fail("only t1")
    return []
`),
		Targets: targets(nss...),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonEvalFailed)
	msg := condition(got, v1alpha1.ConditionReady).Message
	if strings.Count(msg, "shared failure") != 1 || strings.Count(msg, "only t1") != 1 ||
		!strings.Contains(msg, `targets "t0", "t2": `) || !strings.Contains(msg, `target "t1": `) || strings.Contains(msg, `"t3"`) {
		t.Errorf("message %q: want each error once, with its targets", msg)
	}
	want := map[string]struct {
		state v1alpha1.TargetState
		text  string
	}{
		"t0": {v1alpha1.TargetFailed, "shared failure"},
		"t1": {v1alpha1.TargetFailed, "only t1"},
		"t2": {v1alpha1.TargetFailed, "shared failure"},
		"t3": {v1alpha1.TargetPending, "not applied"},
	}
	if len(got.Status.Targets) != len(want) {
		t.Fatalf("rows %+v", got.Status.Targets)
	}
	for _, row := range got.Status.Targets {
		if w := want[row.Name]; row.State != w.state || !strings.Contains(row.Message, w.text) {
			t.Errorf("row %+v, want %s with %q", row, w.state, w.text)
		}
	}
}

// Objects that fail the schemas are not applied; status says why.
func TestValidationFailure(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "invalid", v1alpha1.ManifestSyncSpec{
		Transform: inline("def main(ctx):\n    return [{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"web\"},\n        \"spec\": {\"ports\": [{\"port\": \"eighty\"}]}}]\n"),
		Schemas:   []v1alpha1.SchemaRef{{Builtin: "k8s"}},
		Targets:   targets(ns),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonValidationFailed)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "spec.ports[0].port") {
		t.Errorf("message %q", msg)
	}
	waitEvent(t, ms, EventValidationFailed, "spec.ports[0].port")
}

// A target whose namespace is missing fails alone, and syncs as soon as
// the namespace appears.
func TestMissingNamespaceFailsItsTargetOnly(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, a := env.Namespace(t, nil), env.Namespace(t, nil)
	missing := a + "-later"
	ms := newSync(home, "missing", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["one"]}`),
		Targets:   targets(missing, a),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonApplyFailed)
	configMapWith(t, timeout, ms, a, "one", "target", "t1")
	if row := got.Status.Targets[0]; row.State != v1alpha1.TargetFailed || !strings.Contains(row.Message, `namespace "`+missing+`" not found`) {
		t.Errorf("row %+v", row)
	}
	if row := got.Status.Targets[1]; row.State != v1alpha1.TargetSynced {
		t.Errorf("row %+v", row)
	}
	if got.Status.TargetsSummary != "1/2" {
		t.Errorf("summary %q", got.Status.TargetsSummary)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: missing}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ns) })
	start := time.Now()
	configMapWith(t, timeout, ms, missing, "one", "target", "t0")
	t.Logf("synced %v after the namespace appeared", time.Since(start).Round(time.Millisecond))
	ready(t, ms)
}

// Drift Report leaves a changed object alone and says so.
func TestDriftReport(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "report", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["one"]}`),
		Targets:   targets(ns),
		Policy:    v1alpha1.Policy{Drift: v1alpha1.DriftReport},
	})
	createSync(t, ms)
	ready(t, ms)
	cm := mustConfigMap(t, ns, "one")
	cm.Data["target"] = "edited"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error {
		got := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		if msg := got.Status.Targets[0].Message; !strings.Contains(msg, "ConfigMap "+ns+"/one (changed)") {
			return fmt.Errorf("target message %q", msg)
		}
		if inv := entriesOf(t, got); len(inv) != 1 || !inv[0].Drifted || inv[0].Missing {
			return fmt.Errorf("inventory %+v, want the changed object, drifted", inv)
		}
		return nil
	})
	if cm := mustConfigMap(t, ns, "one"); cm.Data["target"] != "edited" {
		t.Errorf("drift was corrected: %v", cm.Data)
	}
	// Reported by an event, once: resyncs do not find it again.
	waitEvent(t, ms, EventDriftDetected, "ConfigMap "+ns+"/one (changed)")
	drifts := driftTotal.WithLabelValues(home, "report", "t0", driftReported)
	if n := testutil.ToFloat64(drifts); n != 1 {
		t.Errorf("drift reported %v times, want 1", n)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	resync := func() {
		t.Helper()
		for range 3 {
			if _, err := reconciler.Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	resync()
	if n := recorded.count(ms, EventDriftDetected); n != 1 {
		t.Errorf("%d DriftDetected events, want 1", n)
	}

	// A deleted copy is reported too, and stays in the inventory, missing.
	if err := env.Client.Delete(ctx, mustConfigMap(t, ns, "one")); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ms, EventDriftDetected, "ConfigMap "+ns+"/one (deleted)")
	resync()
	if n := recorded.count(ms, EventDriftDetected); n != 2 {
		t.Errorf("%d DriftDetected events, want 2", n)
	}
	if n := testutil.ToFloat64(drifts); n != 2 {
		t.Errorf("drift reported %v times, want 2", n)
	}
	if n := testutil.ToFloat64(driftTotal.WithLabelValues(home, "report", "t0", driftCorrected)); n != 0 {
		t.Errorf("drift corrected %v times under policy Report", n)
	}
	got := &v1alpha1.ManifestSync{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		if inv := entriesOf(t, got); len(inv) != 1 || inv[0].ID != ns+"_one__ConfigMap" || !inv[0].Missing || inv[0].Drifted {
			return fmt.Errorf("inventory %+v, want the deleted object, missing", inv)
		}
		return nil
	})
	if msg := got.Status.Targets[0].Message; !strings.Contains(msg, "ConfigMap "+ns+"/one (deleted)") {
		t.Errorf("target message %q", msg)
	}
	if _, err := getConfigMap(ns, "one"); err == nil {
		t.Error("drift Report re-created the deleted object")
	}
}

// Steady state costs nothing: resyncing an unchanged ManifestSync of 50
// objects makes no write and no request for its objects, as counted by the
// API server itself.
func TestSteadyStateMakesNoRequests(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ms, got, _ := syncFifty(t, "steady")
	if n := len(entriesOf(t, got)); n != 50 {
		t.Fatalf("inventory has %d objects, want 50", n)
	}
	quiet(t)

	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	events := recorded.total()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for i := range 20 {
		res, err := reconciler.Reconcile(ctx, req)
		if err != nil || res.RequeueAfter != 10*time.Minute {
			t.Fatalf("resync %d: %+v, %v", i, res, err)
		}
	}
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The resyncs record no event. The API server's count of event writes
	// is not ours alone: the process's event broadcaster writes the series
	// of earlier tests' repeated events back on a timer of its own (a PATCH
	// of events.k8s.io that a loaded run saw land in this window).
	if n := recorded.total() - events; n != 0 {
		t.Errorf("20 resyncs recorded %d events", n)
	}
	d := after.Sub(before).Without(testenv.Request.EventSeries)
	if n := d.Writes(); n != 0 {
		t.Errorf("20 resyncs made %v writes: %v", n, d)
	}
	objectRequests := d.Count(func(r testenv.Request) bool { return r.Resource == "configmaps" })
	if objectRequests != 0 {
		t.Errorf("20 resyncs made %v requests for ConfigMaps: %v", objectRequests, d)
	}
	// Nor any read of what the reconciler deals with (the API server's
	// own housekeeping, such as its endpoints, is left out).
	ours := map[string]bool{"configmaps": true, "manifestsyncs": true, "namespaces": true, "events": true, "secrets": true}
	if n := d.Count(func(r testenv.Request) bool { return ours[r.Resource] }); n != 0 {
		t.Errorf("20 resyncs made %v requests: %v", n, d)
	}
}

// quiet waits until the API server has served no write for half a second:
// the operator has finished reacting to its own writes.
func quiet(t testing.TB) {
	t.Helper()
	last, err := env.Requests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error {
		time.Sleep(500 * time.Millisecond)
		now, err := env.Requests(context.Background())
		if err != nil {
			return err
		}
		d := now.Sub(last)
		last = now
		if n := d.Writes(); n != 0 {
			return fmt.Errorf("%v writes in the last half second", n)
		}
		return nil
	})
}
