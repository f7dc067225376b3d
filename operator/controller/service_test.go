package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// headlessScript makes a headless Service, as exported from a live
// cluster (clusterIPs ["None"]) when params.exported is set.
const headlessScript = `
def main(ctx):
    spec = {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}
    if ctx.params["exported"]:
        spec["clusterIPs"] = ["None"]
    return [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "labels": {"rev": ctx.params["rev"]}}, "spec": spec}]
`

// A headless Service stays headless: created without a cluster IP, and
// re-applied without a write war or a drift.
func TestHeadlessServiceStaysHeadless(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "headless", v1alpha1.ManifestSyncSpec{
		Transform: inline(headlessScript),
		Params:    params(`{"exported": false, "rev": "1"}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	ready(t, ms)
	headless := func(rev string) *corev1.Service {
		t.Helper()
		svc := &corev1.Service{}
		eventually(t, timeout, func() error {
			return env.Client.Get(ctx, keyOf(ns, "db"), svc)
		})
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIPs[0] != corev1.ClusterIPNone {
			t.Fatalf("Service %s/db: clusterIP %q, clusterIPs %q, want headless", ns, svc.Spec.ClusterIP, svc.Spec.ClusterIPs)
		}
		if svc.Labels["rev"] != rev {
			t.Fatalf("Service %s/db: rev %q, want %q", ns, svc.Labels["rev"], rev)
		}
		return svc
	}
	headless("1")

	// Re-applied with another change, and as exported from a cluster.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"exported": true, "rev": "2"}`) })
	ready(t, ms)
	eventually(t, timeout, func() error {
		svc := &corev1.Service{}
		if err := env.Client.Get(ctx, keyOf(ns, "db"), svc); err != nil {
			return err
		}
		if svc.Labels["rev"] != "2" {
			return fmt.Errorf("Service %s/db not re-applied yet", ns)
		}
		return nil
	})
	quiet(t)
	svc := headless("2")

	// Resyncs find nothing to do: no write, no drift.
	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resync(t, ms, 5)
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.Writes() != 0 {
		t.Errorf("resyncs of a headless Service made %v writes: %v", d.Writes(), d)
	}
	if got := headless("2"); got.ResourceVersion != svc.ResourceVersion {
		t.Errorf("Service %s/db was rewritten (resourceVersion %s -> %s)", ns, svc.ResourceVersion, got.ResourceVersion)
	}
	for _, action := range []string{driftCorrected, driftReported, driftIgnored} {
		if n := testutil.ToFloat64(driftTotal.WithLabelValues(home, "headless", "t0", action)); n != 0 {
			t.Errorf("drift %s %v times", action, n)
		}
	}
	if n := recorded.count(ms, EventDriftCorrected); n != 0 {
		t.Errorf("%d DriftCorrected events", n)
	}
}
