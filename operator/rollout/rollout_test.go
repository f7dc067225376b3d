package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env, testenv.WithWorkloads(), startOperator))
}

// startOperator runs the reconciler against env, as engine operator does.
// MANIFESTSYNC_TEST_LOG=1 shows its logs.
func startOperator(e *testenv.Env) (func(), error) {
	if os.Getenv("MANIFESTSYNC_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	}
	skip := true
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	// One worker: a test that another ManifestSync is not held up by a
	// sync waiting for a hook or a rollout tells a held worker so.
	r := &controller.Reconciler{Options: controller.Options{RetryMin: 100 * time.Millisecond, RetryMax: 2 * time.Second, Concurrency: 1}}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		return nil, err
	}
	return testenv.StartManager(ctx, cancel, mgr)
}

// within bounds the waits for a rollout.
const within = 60 * time.Second

// deployment is a transform returning one Deployment of replicas; a
// nodeSelector that no Node matches makes its pods unschedulable. Its
// minReadySeconds keeps it unavailable for two seconds after kwok made its
// pods ready (within milliseconds), so that a test sees the rollout before
// it ends, on a fast machine too.
func deployment(name string, replicas int, nodeSelector string) *v1alpha1.Transform {
	doc := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: %[2]d
  minReadySeconds: 2
  progressDeadlineSeconds: 600
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {%[3]s}
      containers: [{name: app, image: registry.invalid/app:1}]
`, name, replicas, nodeSelector)
	return &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: "def main(ctx):\n    return yaml.decode_all(" + strconv.Quote(doc) + ")\n"}}
}

func newSync(ns, name string, tr *v1alpha1.Transform, timeout time.Duration) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: tr,
			Targets:   []v1alpha1.Target{{Name: "app", Namespace: ns}},
			Wait:      true,
			Timeout:   &metav1.Duration{Duration: timeout},
		},
	}
}

// available reports whether the Deployment has every replica available.
func available(dep *appsv1.Deployment) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
			return dep.Spec.Replicas != nil && dep.Status.AvailableReplicas == *dep.Spec.Replicas &&
				dep.Status.ObservedGeneration == dep.Generation
		}
	}
	return false
}

// A 3-replica Deployment with spec.wait: Ready turns True only once
// kube-controller-manager has made it Available, and then within seconds.
func TestReadyAfterRollout(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	ms := newSync(ns, "web", deployment("api", 3, ""), within)
	env.CreateSync(t, ms, 30*time.Second)

	var sawProgressing bool
	var availableAt time.Time
	start := time.Now()
	testenv.Eventually(t, within, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		dep := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "api"}, dep); err != nil {
			return err
		}
		if available(dep) && availableAt.IsZero() {
			availableAt = time.Now()
		}
		ready := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case ready == nil:
			return errors.New("no Ready condition")
		case ready.Status == metav1.ConditionTrue:
			if !available(dep) {
				t.Fatalf("Ready while the Deployment is not available: %+v", dep.Status)
			}
			return nil
		case ready.Reason == v1alpha1.ReasonProgressing:
			sawProgressing = true
		}
		return fmt.Errorf("Ready is %s (%s): %s", ready.Status, ready.Reason, ready.Message)
	})
	if !sawProgressing {
		t.Error("Ready was never Progressing: the Deployment was available before the first look")
	}
	t.Logf("the Deployment rolled out in %s; Ready %s after it was seen available",
		availableAt.Sub(start).Round(time.Millisecond), time.Since(availableAt).Round(time.Millisecond))
}

// A Deployment whose pods can never be scheduled ends Ready=False
// HealthCheckFailed within spec.timeout, naming it with its own message.
func TestUnschedulableFailsAtTimeout(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	const timeout = 5 * time.Second
	ms := newSync(ns, "stuck", deployment("api", 2, "no-such-label: x"), timeout)
	start := time.Now()
	env.CreateSync(t, ms, 30*time.Second)
	got := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonHealthCheckFailed, timeout+2*time.Second)
	d := time.Since(start)
	if d < timeout {
		t.Errorf("HealthCheckFailed after %s, before the timeout of %s", d, timeout)
	}
	msg := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "Deployment "+ns+"/api: ") {
		t.Errorf("Ready's message %q does not name the Deployment", msg)
	}
	t.Logf("HealthCheckFailed after %s: %s", d.Round(time.Millisecond), msg)
}
