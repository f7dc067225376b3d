package controller

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/oci"
)

// Prometheus metrics, served by the manager's metrics endpoint. Labels are
// the ManifestSync's namespace and name and, where it applies, the target
// or the source. operator/config/monitoring holds a dashboard and alert
// rules over them; a test checks that every metric they query is here.
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
	driftTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_drift_total",
		Help: "Managed objects found changed or deleted by another writer, by what spec.policy.drift does with them: corrected (re-applied), reported or ignored.",
	}, []string{"namespace", "name", "target", "action"})
	readyGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "manifestsync_ready",
		Help: "1 while the ManifestSync's Ready condition is True, 0 while it is False or Unknown.",
	}, []string{"namespace", "name"})
	suspendedGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "manifestsync_suspended",
		Help: "1 while spec.suspend is set: nothing is synced, and the Ready condition stays the last sync's.",
	}, []string{"namespace", "name"})
	sourceDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "manifestsync_source_duration_seconds",
		Help:    "Time to read one source at a sync, failures included, by type: git (list the remote's refs, fetch what the cache lacks), helm (a conditional index request or a tag listing, a chart the cache lacks) or object (read from the API server, or nothing when the cache shows it unchanged).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17),
	}, []string{"namespace", "name", "source", "type"})
	gitFetchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_git_fetches_total",
		Help: "Reads of git sources, by result: success, pending (the fetch goes on in the background), or why they failed (auth, host_key, unreachable, repo_not_found, ref_not_found, path_not_found, limit, timeout, error).",
	}, []string{"namespace", "name", "source", "result"})
	ociFetchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_oci_fetches_total",
		Help: "Reads of oci sources, by result: success (an unchanged artifact, one manifest HEAD, included), pending (the fetch goes on in the background), or why they failed (unauthorized, not_found, refused, limit, verify_failed, timeout, error).",
	}, []string{"namespace", "name", "source", "result"})
	httpFetchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_http_fetches_total",
		Help: "Reads of http sources, by result: success (an unchanged archive, answered 304, included), pending (the fetch goes on in the background), or why they failed (refused, limit, timeout, error).",
	}, []string{"namespace", "name", "source", "result"})
	helmFetchesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_helm_fetches_total",
		Help: "Reads of helm sources (a chart, or the dependencies of a chart in another source), by result: success, pending (the fetch goes on in the background), or why they failed (unauthorized, not_found, unreachable, limit, timeout, error).",
	}, []string{"namespace", "name", "source", "result"})
	objectsHealth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "manifestsync_objects_health",
		Help: "Applied objects by health (kstatus, or the spec.healthChecks rule of their kind): Current, InProgress, Failed, Terminating, NotFound, Unknown (no status and no rule); as of the last sync, whose watches wake it when an object's status changes.",
	}, []string{"namespace", "name", "health"})
	apiServerReachable = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "manifestsync_apiserver_reachable",
		Help: "1 while the API server answers its /readyz, 0 while it does not (unreachable or not ready): watches wait, and the operator is not ready.",
	})
	apiServerOutages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "manifestsync_apiserver_outages_total",
		Help: "Times the API server stopped answering its /readyz (outages shorter than a scrape interval show here only).",
	})
)

// partialDeleter is a metric vector whose series can be dropped by labels.
type partialDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

var (
	// syncMetrics have series per ManifestSync.
	syncMetrics = []partialDeleter{syncDuration, evalDuration, objectsTotal, failuresTotal, writeWarsTotal,
		driftTotal, readyGauge, suspendedGauge, sourceDuration, gitFetchesTotal, helmFetchesTotal, ociFetchesTotal, httpFetchesTotal, objectsHealth}
	// targetMetrics have series per target.
	targetMetrics = []partialDeleter{syncDuration, objectsTotal, failuresTotal, writeWarsTotal, driftTotal}
	// sourceMetrics have series per source.
	sourceMetrics = []partialDeleter{sourceDuration, gitFetchesTotal, helmFetchesTotal, ociFetchesTotal, httpFetchesTotal}
)

var registerMetrics sync.Once

// RegisterMetrics registers the metrics with controller-runtime's registry;
// calling it more than once is harmless.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		ctrlmetrics.Registry.MustRegister(syncDuration, evalDuration, objectsTotal, failuresTotal, writeWarsTotal, driftTotal,
			readyGauge, suspendedGauge, sourceDuration, gitFetchesTotal, helmFetchesTotal, ociFetchesTotal, httpFetchesTotal, objectsHealth, apiServerReachable, apiServerOutages)
	})
}

// forgetMetrics drops every series of a ManifestSync that is gone.
func forgetMetrics(ns, name string) {
	forget(syncMetrics, prometheus.Labels{"namespace": ns, "name": name})
}

// forgetTargetMetrics drops the series of a target that is no longer
// evaluated (removed from the spec, or a namespace no longer selected), so
// that the series of a ManifestSync stay as many as its targets.
func forgetTargetMetrics(ns, name, target string) {
	forget(targetMetrics, prometheus.Labels{"namespace": ns, "name": name, "target": target})
}

// forgetSourceMetrics drops the series of a source no longer in the spec.
func forgetSourceMetrics(ns, name, src string) {
	forget(sourceMetrics, prometheus.Labels{"namespace": ns, "name": name, "source": src})
}

func forget(vecs []partialDeleter, labels prometheus.Labels) {
	for _, v := range vecs {
		v.DeletePartialMatch(labels)
	}
}

// observeStatus sets the gauges of a ManifestSync from its spec and status
// as they are after a reconcile; one being deleted is forgotten once gone.
func observeStatus(ms *v1alpha1.ManifestSync) {
	if !ms.DeletionTimestamp.IsZero() {
		return
	}
	readyGauge.WithLabelValues(ms.Namespace, ms.Name).Set(boolValue(apimeta.IsStatusConditionTrue(ms.Status.Conditions, v1alpha1.ConditionReady)))
	suspendedGauge.WithLabelValues(ms.Namespace, ms.Name).Set(boolValue(ms.Spec.Suspend))
}

// observeHealth sets the objects of each health of a ManifestSync, from
// its targets' outcomes; every state has a series, 0 when no object is in
// it, so that a sum over time sees objects leave a state.
func observeHealth(ms *v1alpha1.ManifestSync, outcomes []*targetOutcome) {
	n := map[health.Status]int{}
	for _, o := range outcomes {
		n[health.Current] += o.current
		for _, h := range o.health {
			n[h.Status]++
		}
	}
	for _, s := range []health.Status{health.Current, health.InProgress, health.Failed, health.Terminating, health.NotFound, health.Unknown} {
		objectsHealth.WithLabelValues(ms.Namespace, ms.Name, string(s)).Set(float64(n[s]))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Metric actions of objectsTotal.
const (
	metricApplied = "applied"
	metricSkipped = "skipped"
	metricPruned  = "pruned"
)

// Metric actions of driftTotal.
const (
	driftCorrected = "corrected"
	driftReported  = "reported"
	driftIgnored   = "ignored"
)

// driftAction is the action label of driftTotal under a drift policy. A
// correction that failed is retried, and its drift counted again when found
// again.
func driftAction(policy v1alpha1.DriftPolicy) string {
	switch policy {
	case v1alpha1.DriftReport:
		return driftReported
	case v1alpha1.DriftIgnore:
		return driftIgnored
	}
	return driftCorrected
}

// fetchResult is the result label of gitFetchesTotal for a git source's
// read that ended with err. A read that yields its worker to a fetch still
// running in the background (git.ErrPending) is "pending", neither a
// success nor a failure: that fetch ends later, and the read that follows
// is counted with its outcome.
func fetchResult(err error) string {
	return resultOf(err, []reason{
		{git.ErrPending, "pending"},
		{git.ErrAuth, "auth"},
		{git.ErrHostKey, "host_key"},
		{git.ErrUnreachable, "unreachable"},
		{git.ErrRepoNotFound, "repo_not_found"},
		{git.ErrRefNotFound, "ref_not_found"},
		{git.ErrPathNotFound, "path_not_found"},
		{git.ErrLimit, "limit"},
		{context.DeadlineExceeded, "timeout"},
		// verify refused the commit or tag read (SourceVerifyFailed)
		{git.ErrUnsigned, "unsigned"},
		{git.ErrUnknownSigner, "unknown_signer"},
		{git.ErrBadSignature, "bad_signature"},
	})
}

// helmFetchResult is the result label of helmFetchesTotal for a helm
// source's read that ended with err, "pending" as for git.
func helmFetchResult(err error) string {
	return resultOf(err, []reason{
		{source.ErrPending, "pending"},
		{charts.ErrUnauthorized, "unauthorized"},
		{charts.ErrNotFound, "not_found"},
		{charts.ErrUnreachable, "unreachable"},
		{charts.ErrLimit, "limit"},
		{charts.ErrTimeout, "timeout"},
		{context.DeadlineExceeded, "timeout"},
	})
}

// ociFetchResult is the result label of ociFetchesTotal and
// httpFetchesTotal for a read of an oci or http source that ended with
// err, "pending" as for git. (httpsrc's errors are oci's.)
func ociFetchResult(err error) string {
	if _, ok := errors.AsType[*source.VerifyError](err); ok {
		return "verify_failed"
	}
	return resultOf(err, []reason{
		{source.ErrPending, "pending"},
		{oci.ErrUnauthorized, "unauthorized"},
		{oci.ErrNotFound, "not_found"},
		{oci.ErrRefused, "refused"},
		{oci.ErrLimit, "limit"},
		{context.DeadlineExceeded, "timeout"},
	})
}

// reason is an error a fetch may fail with and its result label.
type reason struct {
	err    error
	result string
}

// resultOf is the label of the first of reasons err is, "success" for no
// error and "error" for another.
func resultOf(err error, reasons []reason) string {
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.result
		}
	}
	if err == nil {
		return "success"
	}
	return "error"
}
