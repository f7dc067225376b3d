package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// TestForgetMetrics: the series of a removed target, then of a deleted
// ManifestSync, go away, and those of others stay.
func TestForgetMetrics(t *testing.T) {
	for _, target := range []string{"a", "b"} {
		syncDuration.WithLabelValues("metrics-ns", "ms", target).Observe(1)
		objectsTotal.WithLabelValues("metrics-ns", "ms", target, metricApplied).Inc()
		failuresTotal.WithLabelValues("metrics-ns", "ms", target, "ApplyFailed").Inc()
		driftTotal.WithLabelValues("metrics-ns", "ms", target, driftCorrected).Inc()
	}
	evalDuration.WithLabelValues("metrics-ns", "ms").Observe(1)
	readyGauge.WithLabelValues("metrics-ns", "ms").Set(1)
	suspendedGauge.WithLabelValues("metrics-ns", "ms").Set(0)
	sourceDuration.WithLabelValues("metrics-ns", "ms", "repo", "git").Observe(1)
	gitFetchesTotal.WithLabelValues("metrics-ns", "ms", "repo", "success").Inc()
	objectsHealth.WithLabelValues("metrics-ns", "ms", "Current").Set(2)
	syncDuration.WithLabelValues("metrics-ns", "other", "a").Observe(1)
	readyGauge.WithLabelValues("metrics-ns", "other").Set(0)
	perTarget := func() int {
		return seriesIn(t, syncDuration, "metrics-ns") + seriesIn(t, objectsTotal, "metrics-ns") +
			seriesIn(t, failuresTotal, "metrics-ns") + seriesIn(t, driftTotal, "metrics-ns")
	}
	before := perTarget()

	forgetTargetMetrics("metrics-ns", "ms", "b")
	if n := before - perTarget(); n != 4 {
		t.Errorf("forgetting target b dropped %d series, want 4", n)
	}

	counts := map[string]int{}
	vecs := map[string]prometheus.Collector{"eval": evalDuration, "sync": syncDuration, "ready": readyGauge,
		"suspended": suspendedGauge, "source": sourceDuration, "git": gitFetchesTotal, "drift": driftTotal, "health": objectsHealth}
	for k, v := range vecs {
		counts[k] = seriesIn(t, v, "metrics-ns")
	}
	forgetMetrics("metrics-ns", "ms")
	// Target a's series of sync and drift, and one series of each other.
	for k, v := range vecs {
		if n := counts[k] - seriesIn(t, v, "metrics-ns"); n != 1 {
			t.Errorf("forgetting the ManifestSync dropped %d %s series, want 1", n, k)
		}
	}
	if n := syncDuration.DeletePartialMatch(prometheus.Labels{"namespace": "metrics-ns", "name": "other"}); n != 1 {
		t.Errorf("the other ManifestSync has %d sync series left, want 1", n)
	}
	if n := readyGauge.DeletePartialMatch(prometheus.Labels{"namespace": "metrics-ns", "name": "other"}); n != 1 {
		t.Errorf("the other ManifestSync has %d ready series left, want 1", n)
	}
}

// TestSourceSeriesFollowTheSpec: a source's series go when it leaves the
// spec; those of the sources still there stay.
func TestSourceSeriesFollowTheSpec(t *testing.T) {
	r := &Reconciler{Git: repos.provider}
	gitSource := func(name string) v1alpha1.Source {
		return v1alpha1.Source{Name: name, Git: &v1alpha1.GitSource{URL: "test://kustomize"}}
	}
	ms := newSync("metrics-src", "ms", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{gitSource("a"), gitSource("b")}})
	st := &syncState{}
	if _, err := r.fetchSources(context.Background(), ms, st); err != nil {
		t.Fatal(err)
	}
	if n := seriesIn(t, gitFetchesTotal, "metrics-src"); n != 2 {
		t.Fatalf("%d git fetch series, want 2", n)
	}
	ms.Spec.Sources = []v1alpha1.Source{gitSource("b")}
	if _, err := r.fetchSources(context.Background(), ms, st); err != nil {
		t.Fatal(err)
	}
	for _, v := range []prometheus.Collector{gitFetchesTotal, sourceDuration} {
		if n := seriesIn(t, v, "metrics-src"); n != 1 {
			t.Errorf("%d series left, want 1 (source b)", n)
		}
	}
	if n := counterValue(gitFetchesTotal.WithLabelValues("metrics-src", "ms", "b", "success")); n != 2 {
		t.Errorf("source b fetched %v times, want 2", n)
	}
	forgetMetrics("metrics-src", "ms")
}

// seriesIn counts the series of c in namespace ns: the operator of the
// other tests changes the series of theirs meanwhile.
func seriesIn(t *testing.T, c prometheus.Collector, ns string) int {
	t.Helper()
	return seriesWith(t, c, prometheus.Labels{"namespace": ns})
}

// seriesWith counts the series of c that carry every label of want. A
// vector curried with labels still collects every series of the vector
// (every test's, in this shared registry), so a test counts its own
// series with this, never with testutil.CollectAndCount.
func seriesWith(t *testing.T, c prometheus.Collector, want prometheus.Labels) int {
	t.Helper()
	return len(seriesLabels(t, c, want))
}

// seriesLabels is the label sets of the series seriesWith counts, as
// name=value lists, to say which series a test did not expect.
func seriesLabels(t *testing.T, c prometheus.Collector, want prometheus.Labels) []string {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var found []string
	for m := range ch {
		var out dto.Metric
		if err := m.Write(&out); err != nil {
			t.Error(err)
			continue
		}
		matched := 0
		var labels []string
		for _, l := range out.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				matched++
			}
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		if matched == len(want) {
			found = append(found, strings.Join(labels, ","))
		}
	}
	return found
}

// TestFetchResult: a git read is counted by why it failed, however deeply
// the reason is wrapped; one that waits on a fetch still running is
// pending, not an error.
func TestFetchResult(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "success"},
		{fmt.Errorf("source %q: git x: %w: %w", "repo", git.ErrAuth, errors.New("authentication required")), "auth"},
		{fmt.Errorf("source: %w", git.ErrHostKey), "host_key"},
		{fmt.Errorf("source: %w: dial tcp: connection refused", git.ErrUnreachable), "unreachable"},
		{fmt.Errorf("source: %w", git.ErrRepoNotFound), "repo_not_found"},
		{fmt.Errorf("source: %w", git.ErrRefNotFound), "ref_not_found"},
		{fmt.Errorf("source: %w", git.ErrPathNotFound), "path_not_found"},
		{fmt.Errorf("source: %w", git.ErrLimit), "limit"},
		{fmt.Errorf("source: timed out after 1m0s: %w", context.DeadlineExceeded), "timeout"},
		{source.ErrGitNotWired, "error"},
		{fmt.Errorf("source %q: git x: %w", "repo", &git.PendingError{Done: make(chan struct{})}), "pending"},
	} {
		if got := fetchResult(c.err); got != c.want {
			t.Errorf("fetchResult(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "success"},
		{fmt.Errorf("source %q: helm chart x: index.yaml: %w: the server answered 401 Unauthorized", "chart", charts.ErrUnauthorized), "unauthorized"},
		{fmt.Errorf("source: %w: no version matches", charts.ErrNotFound), "not_found"},
		{fmt.Errorf("source: %w: connection refused", charts.ErrUnreachable), "unreachable"},
		{fmt.Errorf("source: %w: index.yaml larger than 16 bytes", charts.ErrLimit), "limit"},
		{fmt.Errorf("source: %w: timeout awaiting response headers", charts.ErrTimeout), "timeout"},
		{fmt.Errorf("source: timed out after 1m0s: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("source %q: helm x: %w", "chart", &source.PendingError{Done: make(chan struct{})}), "pending"},
		{errors.New("not a valid chart"), "error"},
	} {
		if got := helmFetchResult(c.err); got != c.want {
			t.Errorf("helmFetchResult(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestDriftAction: drift is counted by what the policy does with it; the
// default policy corrects it.
func TestDriftAction(t *testing.T) {
	for policy, want := range map[v1alpha1.DriftPolicy]string{
		"": driftCorrected, v1alpha1.DriftCorrect: driftCorrected,
		v1alpha1.DriftReport: driftReported, v1alpha1.DriftIgnore: driftIgnored,
	} {
		if got := driftAction(policy); got != want {
			t.Errorf("driftAction(%q) = %q, want %q", policy, got, want)
		}
	}
}

// waitGauge waits until g has the value want: the reconciler sets its
// gauges after the status the test reads.
func waitGauge(t testing.TB, g prometheus.Gauge, want float64) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		if got := testutil.ToFloat64(g); got != want {
			return fmt.Errorf("gauge %v, want %v", got, want)
		}
		return nil
	})
}
