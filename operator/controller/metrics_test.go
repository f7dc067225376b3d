package controller

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestForgetMetrics: the series of a removed target, then of a deleted
// ManifestSync, go away, and those of others stay.
func TestForgetMetrics(t *testing.T) {
	for _, target := range []string{"a", "b"} {
		syncDuration.WithLabelValues("metrics-ns", "ms", target).Observe(1)
		objectsTotal.WithLabelValues("metrics-ns", "ms", target, metricApplied).Inc()
		failuresTotal.WithLabelValues("metrics-ns", "ms", target, "ApplyFailed").Inc()
	}
	evalDuration.WithLabelValues("metrics-ns", "ms").Observe(1)
	syncDuration.WithLabelValues("metrics-ns", "other", "a").Observe(1)
	before := testutil.CollectAndCount(syncDuration) + testutil.CollectAndCount(objectsTotal) + testutil.CollectAndCount(failuresTotal)

	forgetTargetMetrics("metrics-ns", "ms", "b")
	after := testutil.CollectAndCount(syncDuration) + testutil.CollectAndCount(objectsTotal) + testutil.CollectAndCount(failuresTotal)
	if before-after != 3 {
		t.Errorf("forgetting target b dropped %d series, want 3", before-after)
	}

	evals := testutil.CollectAndCount(evalDuration)
	syncs := testutil.CollectAndCount(syncDuration)
	forgetMetrics("metrics-ns", "ms")
	if n := evals - testutil.CollectAndCount(evalDuration); n != 1 {
		t.Errorf("forgetting the ManifestSync dropped %d eval series, want 1", n)
	}
	if n := syncs - testutil.CollectAndCount(syncDuration); n != 1 {
		t.Errorf("forgetting the ManifestSync dropped %d sync series, want 1 (target a)", n)
	}
	if n := syncDuration.DeletePartialMatch(prometheus.Labels{"namespace": "metrics-ns", "name": "other"}); n != 1 {
		t.Errorf("the other ManifestSync has %d sync series left, want 1", n)
	}
}
