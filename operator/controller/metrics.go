package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Prometheus metrics, served by the manager's metrics endpoint. Labels are
// the ManifestSync's namespace and name and, where it applies, the target.
var (
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "manifestsync_target_sync_duration_seconds",
		Help:    "Time to apply one target's objects (and prune them).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"namespace", "name", "target"})
	evalDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "manifestsync_eval_duration_seconds",
		Help:    "Time to evaluate a ManifestSync (every target); a sync whose inputs did not change evaluates nothing and observes nothing.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"namespace", "name"})
	objectsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_objects_total",
		Help: "Objects handled, by action: applied (created or changed), skipped (unchanged, kept or in conflict) and pruned.",
	}, []string{"namespace", "name", "target", "action"})
	failuresTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_failures_total",
		Help: "Failed syncs, by target (empty when nothing was applied) and reason.",
	}, []string{"namespace", "name", "target", "reason"})
	writeWarsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_write_wars_total",
		Help: "Writes refused because the object was rewritten to the same desired state more than --write-war-limit times within --write-war-window: someone keeps changing it back.",
	}, []string{"namespace", "name", "target"})
	apiServerReachable = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "manifestsync_apiserver_reachable",
		Help: "1 while the API server answers its /readyz, 0 while it does not (unreachable or not ready): watches wait, and the operator is not ready.",
	})
	apiServerOutages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "manifestsync_apiserver_outages_total",
		Help: "Times the API server stopped answering its /readyz (outages shorter than a scrape interval show here only).",
	})
)

var registerMetrics sync.Once

// RegisterMetrics registers the metrics with controller-runtime's registry;
// calling it more than once is harmless.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		ctrlmetrics.Registry.MustRegister(syncDuration, evalDuration, objectsTotal, failuresTotal, writeWarsTotal, apiServerReachable, apiServerOutages)
	})
}

// forgetMetrics drops every series of a ManifestSync that is gone.
func forgetMetrics(ns, name string) {
	labels := prometheus.Labels{"namespace": ns, "name": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{syncDuration, evalDuration, objectsTotal, failuresTotal, writeWarsTotal} {
		v.DeletePartialMatch(labels)
	}
}

// forgetTargetMetrics drops the series of a target that is no longer
// evaluated (removed from the spec, or a namespace no longer selected), so
// that the series of a ManifestSync stay as many as its targets.
func forgetTargetMetrics(ns, name, target string) {
	labels := prometheus.Labels{"namespace": ns, "name": name, "target": target}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{syncDuration, objectsTotal, failuresTotal, writeWarsTotal} {
		v.DeletePartialMatch(labels)
	}
}

// Metric actions of objectsTotal.
const (
	metricApplied = "applied"
	metricSkipped = "skipped"
	metricPruned  = "pruned"
)
