package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
)

// The API server is killed, and started again 20s later. Meanwhile the
// operator says so: it logs it once, its /readyz fails,
// manifestsync_apiserver_reachable is 0. Once the API server answers
// again, the operator is ready again, logs the outage's length, and sees
// the changes made then (of an object source, of the ManifestSync, of a
// managed object) within seconds: its watches do not sit out client-go's
// backoff (which took them 40-56s before).
func TestAPIServerOutage(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target, other := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	op := startOperator(t, controller.Options{}, home)
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "src"}, Data: map[string]string{"v": "1"}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources:  []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src"}}},
			Targets:  []v1alpha1.Target{{Name: "prod", Namespace: target}},
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
	key := client.ObjectKeyFromObject(ms)
	createSync(t, ms)
	waitFor(t, key, v1alpha1.ReasonSynced)
	eventually(t, timeout, hasData(target, "src", "v", "1"))
	eventually(t, timeout, op.readiness(http.StatusOK, 1))

	if err := env.KillAPIServer(); err != nil {
		t.Fatalf("killing the API server: %v", err)
	}
	stopped := time.Now()
	running := false
	start := func() {
		if !running {
			running = true
			if err := env.StartAPIServer(); err != nil {
				t.Fatalf("starting the API server again: %v", err)
			}
		}
	}
	t.Cleanup(start) // before the ManifestSync's deletion
	eventually(t, timeout, op.readiness(http.StatusInternalServerError, 0))
	t.Logf("not ready %v after the API server stopped", time.Since(stopped).Round(time.Millisecond))
	time.Sleep(time.Until(stopped.Add(20 * time.Second)))
	// Once, with the probe's error: which error (connection refused, a
	// reset, a timeout) is the machine's to decide, not the operator's.
	if lines := op.logs.with("API server unreachable", "GET /readyz: "); len(lines) != 1 {
		t.Errorf("%d log lines say why the API server is unreachable, want 1: %q (every line: %q)", len(lines), lines, op.logs.with("unreachable"))
	}

	start()
	answering := time.Now()
	t.Logf("the API server answers again after %v", answering.Sub(stopped).Round(time.Millisecond))
	// A change of the source and of the ManifestSync (a second target),
	// then of a managed object (deleted, drift corrected), each seen
	// through another cache's watch.
	eventually(t, timeout, func() error {
		cur := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(src), cur); err != nil {
			return err
		}
		cur.Data["v"] = "2"
		return env.Client.Update(ctx, cur)
	})
	updateSpec(t, key, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Targets = append(ms.Spec.Targets, v1alpha1.Target{Name: "other", Namespace: other})
	})
	// Under client-go's backoff the watches came back after 40-56 s; the
	// probe reopens them within its period (seconds even at load 15).
	within := 25 * time.Second
	deadline := time.Until(answering.Add(within))
	eventually(t, deadline, hasData(target, "src", "v", "2"))
	eventually(t, time.Until(answering.Add(within)), hasData(other, "src", "v", "2"))
	t.Logf("changes applied %v after the API server answered again", time.Since(answering).Round(time.Millisecond))
	eventually(t, time.Until(answering.Add(within)), op.readiness(http.StatusOK, 1))
	back := op.logs.with("API server reachable again")
	if len(back) != 1 {
		t.Fatalf("%d log lines say the API server is reachable again, want 1: %q", len(back), back)
	}
	// "outage"="24.512s"
	_, outage, _ := strings.Cut(back[0], `"outage"="`)
	outage, _, _ = strings.Cut(outage, `"`)
	if d, err := time.ParseDuration(outage); err != nil || d < 15*time.Second || d > time.Since(stopped) {
		t.Errorf("the outage's length in %q is not that of the outage (%v)", back[0], answering.Sub(stopped))
	}

	deleted := time.Now()
	if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "src"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, within, hasData(target, "src", "v", "2"))
	t.Logf("a deleted copy back %v after its deletion", time.Since(deleted).Round(time.Millisecond))
}

// readiness is a condition: the operator's readiness check of the API
// server answers code, and the metric manifestsync_apiserver_reachable is
// reachable.
func (op *operator) readiness(code int, reachable float64) func() error {
	return func() error {
		res, err := http.Get(op.probeURL + "/readyz/apiserver")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != code {
			return fmt.Errorf("/readyz/apiserver answers %d, want %d", res.StatusCode, code)
		}
		got, err := gauge("manifestsync_apiserver_reachable")
		if err != nil {
			return err
		}
		if got != reachable {
			return fmt.Errorf("manifestsync_apiserver_reachable is %v, want %v", got, reachable)
		}
		return nil
	}
}

// gauge is the value of a gauge without labels, as the metrics endpoint
// serves it.
func gauge(name string) (float64, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no gauge %s", name)
}
