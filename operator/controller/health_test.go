package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// objectsOf is a transform that returns the YAML documents given.
func objectsOf(docs ...string) *v1alpha1.Transform {
	return inline("def main(ctx):\n    return yaml.decode_all(" + strconv.Quote(strings.Join(docs, "\n---\n")) + ")\n")
}

// deploymentDoc is a Deployment of n replicas, in wave.
func deploymentDoc(name string, replicas, wave int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  annotations: {manifestsync.dev/wave: "%d"}
spec:
  replicas: %d
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers: [{name: app, image: example.com/app:1}]
`, name, wave, replicas, name, name)
}

// rollOut writes the status kube-controller-manager writes once every
// replica of the Deployment is available, and returns the resourceVersion
// of that write.
func rollOut(t testing.TB, ns, name string) string {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dep); err != nil {
		t.Fatal(err)
	}
	n := *dep.Spec.Replicas
	patch := fmt.Sprintf(`{"status":{"observedGeneration":%d,"replicas":%d,"updatedReplicas":%d,"readyReplicas":%d,"availableReplicas":%d,
"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","lastUpdateTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"},
{"type":"Progressing","status":"True","reason":"NewReplicaSetAvailable","lastUpdateTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`,
		dep.Generation, n, n, n, n)
	if err := env.Client.Status().Patch(context.Background(), dep, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	return dep.ResourceVersion
}

// waitingSpec is a spec with spec.wait that applies tr to namespace ns.
func waitingSpec(tr *v1alpha1.Transform, ns string, timeout time.Duration) v1alpha1.ManifestSyncSpec {
	return v1alpha1.ManifestSyncSpec{
		Transform: tr,
		Targets:   targets(ns),
		Wait:      true,
		Timeout:   &metav1.Duration{Duration: timeout},
		Interval:  &metav1.Duration{Duration: time.Hour},
	}
}

// targetRow is the status row of the ManifestSync's only target.
func targetRow(t testing.TB, ms *v1alpha1.ManifestSync) v1alpha1.TargetStatus {
	t.Helper()
	if len(ms.Status.Targets) != 1 {
		t.Fatalf("target rows: %+v", ms.Status.Targets)
	}
	return ms.Status.Targets[0]
}

// With spec.wait, Ready turns True only when the Deployment is available,
// woken by the watch of its status, not by a poll.
func TestWaitReadyWhenCurrent(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "wait", waitingSpec(objectsOf(deploymentDoc("api", 3, 0)), ns, time.Minute))
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonProgressing)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "waiting for Deployment "+ns+"/api") {
		t.Errorf("Ready's message %q does not name the Deployment", msg)
	}
	if row := targetRow(t, got); row.Health != v1alpha1.HealthProgressing || row.State != v1alpha1.TargetSynced {
		t.Errorf("row %+v, want Synced and Progressing", row)
	}
	if c := condition(got, v1alpha1.ConditionHealthy); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProgressing {
		t.Errorf("Healthy = %+v", c)
	}
	waitGauge(t, objectsHealth.WithLabelValues(home, "wait", "InProgress"), 1)
	time.Sleep(500 * time.Millisecond)
	if got := waitFor(t, ms, v1alpha1.ReasonProgressing); condition(got, v1alpha1.ConditionReady).Status != metav1.ConditionFalse {
		t.Fatal("Ready before the Deployment is available")
	}

	start := time.Now()
	rollOut(t, ns, "api")
	got = env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Second)
	t.Logf("Ready %s after the Deployment turned available", time.Since(start).Round(time.Millisecond))
	if row := targetRow(t, got); row.Health != v1alpha1.HealthHealthy {
		t.Errorf("row %+v, want Healthy", row)
	}
	if c := condition(got, v1alpha1.ConditionHealthy); c.Status != metav1.ConditionTrue {
		t.Errorf("Healthy = %+v", c)
	}
	waitGauge(t, objectsHealth.WithLabelValues(home, "wait", "Current"), 1)
	waitGauge(t, objectsHealth.WithLabelValues(home, "wait", "InProgress"), 0)
}

// A Deployment that never becomes available fails the wait when
// spec.timeout passes, naming it with its own message.
func TestWaitTimeout(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "timeout", waitingSpec(objectsOf(deploymentDoc("stuck", 3, 0), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine}\n"), ns, 2*time.Second))
	start := time.Now()
	createSync(t, ms)
	got := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonHealthCheckFailed, 3*time.Second) // at the timeout, not a resync later
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("HealthCheckFailed after %s, before the timeout", d)
	}
	msg := condition(got, v1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "Deployment "+ns+"/stuck: LessReplicas: Replicas: 0/3") || strings.Contains(msg, "ConfigMap") {
		t.Errorf("Ready's message %q does not name the Deployment alone, with its message", msg)
	}
	if row := targetRow(t, got); row.Health != v1alpha1.HealthDegraded {
		t.Errorf("row %+v, want Degraded", row)
	}
	if c := condition(got, v1alpha1.ConditionStalled); c.Status != metav1.ConditionFalse {
		t.Errorf("Stalled = %+v", c)
	}
	waitEvent(t, ms, EventHealthCheckFailed, "Deployment "+ns+"/stuck")

	// It recovers when the Deployment does.
	rollOut(t, ns, "stuck")
	got = env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Second)
	if row := targetRow(t, got); row.Health != v1alpha1.HealthHealthy {
		t.Errorf("row %+v, want Healthy", row)
	}
}

// Without spec.wait, Ready means applied; the health is reported beside.
func TestHealthWithoutWait(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "nowait", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(deploymentDoc("api", 1, 0)),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := ready(t, ms)
	if row := targetRow(t, got); row.Health != v1alpha1.HealthProgressing {
		t.Errorf("row %+v, want Progressing", row)
	}
	if c := condition(got, v1alpha1.ConditionHealthy); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonProgressing {
		t.Errorf("Healthy = %+v", c)
	}
	rollOut(t, ns, "api")
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		if c := condition(cur, v1alpha1.ConditionHealthy); c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Healthy = %+v", c)
		}
		if h := cur.Status.Targets[0].Health; h != v1alpha1.HealthHealthy {
			return fmt.Errorf("target health %s", h)
		}
		return nil
	})
}

// widgetCRD is a namespaced CRD of kind Widget in group, with a status
// subresource.
func widgetCRD(group string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%s}
spec:
  group: %s
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, group, group)
}

func widgetDoc(group, name string, wave int) string {
	return fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: %s, annotations: {manifestsync.dev/wave: \"%d\"}}\nspec: {size: 1}\n", group, name, wave)
}

func setWidgetPhase(t testing.TB, group, ns, name, phase string) {
	t.Helper()
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(group + "/v1")
	w.SetKind("Widget")
	w.SetNamespace(ns)
	w.SetName(name)
	patch := fmt.Sprintf(`{"status":{"phase":%q}}`, phase)
	if err := env.Client.Status().Patch(context.Background(), w, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// A custom resource follows its spec.healthChecks rule; one without a
// status and without a rule is Unknown, never healthy. The CRD, applied
// in the same target, is applied and Established first.
func TestHealthCheckRule(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	group := ns + ".rule.example.com"
	other := ns + ".other.example.com"
	ms := newSync(home, "rule", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(widgetCRD(group), widgetDoc(group, "w", 0)),
		Targets:   targets(ns),
		Wait:      true,
		Timeout:   &metav1.Duration{Duration: time.Minute},
		Interval:  &metav1.Duration{Duration: time.Hour},
		HealthChecks: []v1alpha1.HealthCheck{{
			APIVersion: group + "/v1", Kind: "Widget",
			Current: `self.status.phase == "Running"`,
			Failed:  `self.status.phase == "Crashed"`,
		}},
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonProgressing)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "waiting for Widget "+ns+"/w") {
		t.Errorf("Ready's message %q", msg)
	}
	setWidgetPhase(t, group, ns, "w", "Starting")
	got = env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonProgressing, 2*time.Second)
	setWidgetPhase(t, group, ns, "w", "Running")
	got = env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Second)
	if row := targetRow(t, got); row.Health != v1alpha1.HealthHealthy {
		t.Errorf("row %+v", row)
	}
	setWidgetPhase(t, group, ns, "w", "Crashed")
	got = env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonHealthCheckFailed, 2*time.Second)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "Widget "+ns+"/w: spec.healthChecks[0].failed is true") {
		t.Errorf("Ready's message %q", msg)
	}

	// A kind without a rule and objects without a status: Unknown.
	setWidgetPhase(t, group, ns, "w", "Running")
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = objectsOf(widgetCRD(group), widgetDoc(group, "w", 0), widgetCRD(other), widgetDoc(other, "x", 0))
	})
	got = waitFor(t, ms, v1alpha1.ReasonProgressing)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "waiting for Widget "+ns+"/x") {
		t.Errorf("Ready's message %q", msg)
	}
	time.Sleep(300 * time.Millisecond)
	if got := waitFor(t, ms, v1alpha1.ReasonProgressing); targetRow(t, got).Health != v1alpha1.HealthUnknown {
		t.Errorf("row %+v, want Unknown", targetRow(t, got))
	}
}

// Health costs nothing in steady state: resyncs of a healthy ManifestSync
// with spec.wait read its objects' health from the watches' cache, and
// send nothing.
func TestWaitSteadyStateMakesNoRequests(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "steadywait", waitingSpec(objectsOf(deploymentDoc("api", 2, 0), deploymentDoc("worker", 1, 1),
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"), ns, time.Minute))
	createSync(t, ms)
	waitFor(t, ms, v1alpha1.ReasonProgressing)
	rollOut(t, ns, "api")
	eventually(t, timeout, func() error {
		_, err := getDeployment(ns, "worker")
		return err
	})
	rollOut(t, ns, "worker")
	env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Second)
	quiet(t)

	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for i := range 20 {
		if res, err := reconciler.Reconcile(ctx, req); err != nil || res.RequeueAfter != time.Hour {
			t.Fatalf("resync %d: %+v, %v", i, res, err)
		}
	}
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	ours := map[string]bool{"deployments": true, "configmaps": true, "manifestsyncs": true, "namespaces": true, "events": true}
	if n := d.Count(func(r testenv.Request) bool { return ours[r.Resource] }); n != 0 {
		t.Errorf("20 resyncs made %v requests: %v", n, d)
	}
}

func getDeployment(ns, name string) (*appsv1.Deployment, error) {
	dep := &appsv1.Deployment{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, dep)
	return dep, err
}
