package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	// The sharding metrics, which engine operator registers with
	// --shards auto, and the dashboard's Sharding row queries.
	_ "github.com/manifestsync/manifestsync/operator/shard"
)

// The dashboard and the alert rules shipped for the operator.
const (
	dashboardFile = "../config/monitoring/dashboard.json"
	rulesFile     = "../config/monitoring/rules.yaml"
)

// TestMonitoringQueriesExportedMetrics: every query of the Grafana
// dashboard and of the alert rules parses as PromQL, and every metric it
// names is one the operator exports on /metrics.
func TestMonitoringQueriesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	var queries []query
	for file, read := range map[string]func([]byte) ([]query, error){dashboardFile: dashboardQueries, rulesFile: ruleQueries} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := read(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(qs) < 5 {
			t.Fatalf("%s: %d queries found, want every panel's and rule's", file, len(qs))
		}
		queries = append(queries, qs...)
	}
	names := map[string]bool{}
	for _, q := range queries {
		ns, err := metricNames(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		for _, n := range ns {
			names[n] = true
		}
	}
	for _, err := range unexported(queries, exported) {
		t.Error(err)
	}
	// What the issue asks the dashboard and the alerts to show.
	for _, want := range []string{"manifestsync_ready", "manifestsync_target_sync_duration_seconds_bucket",
		"manifestsync_eval_duration_seconds_bucket", "manifestsync_objects_total", "manifestsync_failures_total",
		"manifestsync_drift_total", "manifestsync_write_wars_total", "manifestsync_git_fetches_total",
		"manifestsync_source_duration_seconds_bucket", "manifestsync_apiserver_reachable", "workqueue_depth",
		"manifestsync_objects_health", "manifestsync_shard_owned", "manifestsync_shard_moves_total", "manifestsync_shard_drains_total",
		"manifestsync_shard_drain_acks_total", "manifestsync_shard_fences_total", "manifestsync_shard_members"} {
		if !names[want] {
			t.Errorf("no dashboard panel or alert queries %s", want)
		}
	}
}

// TestMonitoringCheckFindsUnknownMetrics: the check above fails a query
// naming a metric the operator does not export, however it names it, and
// one that does not parse.
func TestMonitoringCheckFindsUnknownMetrics(t *testing.T) {
	exported := map[string]bool{"manifestsync_ready": true, "manifestsync_eval_duration_seconds": true,
		"manifestsync_eval_duration_seconds_bucket": true}
	dashboard := `{"templating": {"list": [{"name": "ns", "type": "query", "query": {"query": "label_values(manifestsync_readyness, namespace)"}}]},
	"panels": [
	  {"title": "ok", "targets": [{"expr": "sum(manifestsync_ready{namespace=~\"$ns\"})"}]},
	  {"title": "row", "type": "row", "panels": [
	    {"title": "typo", "targets": [{"expr": "rate(manifestsync_objects_totl[$__rate_interval])"}]},
	    {"title": "by name", "targets": [{"expr": "{__name__=\"manifestsync_gone\", namespace=\"a\"}"}]}]},
	  {"title": "buckets", "targets": [{"expr": "histogram_quantile(0.9, rate(manifestsync_eval_duration_seconds_bucket[5m])) + on() group_left manifestsync_sync_seconds_bucket"}]},
	  {"title": "broken", "targets": [{"expr": "sum(rate(manifestsync_ready[5m])"}]}]}`
	queries, err := dashboardQueries([]byte(dashboard))
	if err != nil {
		t.Fatal(err)
	}
	rules := `spec:
  groups:
  - name: g
    rules:
    - alert: Unknown
      expr: absent(manifestsync_nothing_total) or manifestsync_ready == 0
`
	more, err := ruleQueries([]byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, err := range unexported(append(queries, more...), exported) {
		got = append(got, err.Error())
	}
	want := []string{
		`dashboard panel "typo": manifestsync_objects_totl is not exported`,
		`dashboard panel "by name": manifestsync_gone is not exported`,
		`dashboard panel "buckets": manifestsync_sync_seconds_bucket is not exported`,
		`dashboard panel "broken": `,
		`dashboard variable "ns": manifestsync_readyness is not exported`,
		`rule "Unknown": manifestsync_nothing_total is not exported`,
	}
	if len(got) != len(want) {
		t.Fatalf("errors:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// query is one PromQL expression of the dashboard or the rules; where
// names it for a person.
type query struct {
	where string
	expr  string
}

// unexported checks every query: it must parse and name only exported
// metrics.
func unexported(queries []query, exported map[string]bool) []error {
	var errs []error
	for _, q := range queries {
		names, err := metricNames(q.expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.where, err))
			continue
		}
		if len(names) == 0 {
			errs = append(errs, fmt.Errorf("%s: %q names no metric", q.where, q.expr))
		}
		for _, n := range names {
			if !exported[n] {
				errs = append(errs, fmt.Errorf("%s: %s is not exported", q.where, n))
			}
		}
	}
	return errs
}

// promql is Prometheus's own PromQL parser, as a server runs it by default.
var promql = parser.NewParser(parser.Options{})

// grafanaIntervals are Grafana's built-in range variables, which PromQL
// reads as durations once Grafana has substituted them; other variables
// appear only inside label matchers' strings.
var grafanaIntervals = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

// metricNames parses expr and returns the metric names of its vector
// selectors, written as names or as __name__ matchers.
func metricNames(expr string) ([]string, error) {
	node, err := promql.ParseExpr(grafanaIntervals.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name != "" {
			names = append(names, vs.Name)
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" {
				continue
			}
			if m.Type != labels.MatchEqual {
				bad = fmt.Errorf("selector %s matches metric names by pattern: name them", vs)
				continue
			}
			names = append(names, m.Value)
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names), bad
}

// labelValues is Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// dashboardQueries returns the expression of every panel target,
// collapsed rows' panels included, and the selector of every
// label_values variable.
func dashboardQueries(data []byte) ([]query, error) {
	type panel struct {
		Title   string  `json:"title"`
		Type    string  `json:"type"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, query{fmt.Sprintf("dashboard panel %q", p.Title), t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, fmt.Errorf("variable %q: %w", v.Name, err)
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			return nil, fmt.Errorf("variable %q: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		out = append(out, query{fmt.Sprintf("dashboard variable %q", v.Name), m[1]})
	}
	return out, nil
}

// ruleQueries returns the expression of every rule of a PrometheusRule.
func ruleQueries(data []byte) ([]query, error) {
	var pr struct {
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert  string `json:"alert"`
					Record string `json:"record"`
					Expr   string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		return nil, err
	}
	var out []query
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			out = append(out, query{fmt.Sprintf("rule %q", r.Alert+r.Record), r.Expr})
		}
	}
	return out, nil
}

// exportedMetrics returns the name of every series the operator exports
// on /metrics, as `engine operator` registers them: ours, and
// controller-runtime's (a controller's reconciles and work queue, the
// process and the Go runtime). A histogram exports NAME_bucket, NAME_sum
// and NAME_count.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	RegisterMetrics()
	// Vectors export nothing until they have a series: give each one.
	const ns, name = "monitoring-test", "probe"
	syncDuration.WithLabelValues(ns, name, "t").Observe(1)
	evalDuration.WithLabelValues(ns, name).Observe(1)
	objectsTotal.WithLabelValues(ns, name, "t", metricApplied).Inc()
	failuresTotal.WithLabelValues(ns, name, "t", v1alpha1.ReasonApplyFailed).Inc()
	writeWarsTotal.WithLabelValues(ns, name, "t").Inc()
	driftTotal.WithLabelValues(ns, name, "t", driftCorrected).Inc()
	readyGauge.WithLabelValues(ns, name).Set(1)
	suspendedGauge.WithLabelValues(ns, name).Set(0)
	sourceDuration.WithLabelValues(ns, name, "repo", "git").Observe(1)
	gitFetchesTotal.WithLabelValues(ns, name, "repo", "success").Inc()
	objectsHealth.WithLabelValues(ns, name, "Current").Set(1)
	t.Cleanup(func() { forgetMetrics(ns, name) })

	// A controller that reconciles once, as the operator's does.
	reconciled := make(chan struct{}, 1)
	skip := true
	c, err := ctrlcontroller.NewUnmanaged("monitoring-probe", ctrlcontroller.Options{
		SkipNameValidation: &skip,
		Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			select {
			case reconciled <- struct{}{}:
			default:
			}
			return reconcile.Result{}, nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan event.GenericEvent, 1)
	if err := c.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("probe controller: %v", err)
		}
	})
	events <- event.GenericEvent{Object: &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
	select {
	case <-reconciled:
	case <-time.After(timeout):
		t.Fatal("the probe controller did not reconcile")
	}

	exported := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for !exported["controller_runtime_reconcile_time_seconds"] && time.Now().Before(deadline) {
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			exported[f.GetName()] = true
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					exported[f.GetName()+suffix] = true
				}
			case dto.MetricType_SUMMARY:
				exported[f.GetName()+"_sum"] = true
				exported[f.GetName()+"_count"] = true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return exported
}

// TestAlertRules: the PrometheusRule's groups are a valid Prometheus rule
// file, as Prometheus itself reads one (expressions, durations, label
// names, annotation templates), and hold the alerts docs/operations.md documents.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Spec       json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s, want a monitoring.coreos.com/v1 PrometheusRule", rulesFile, pr.APIVersion, pr.Kind)
	}
	groups, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(groups, false, model.UTF8Validation, promql)
	for _, err := range errs {
		t.Errorf("%s: %v", rulesFile, err)
	}
	if rgs == nil {
		t.FailNow()
	}
	alerts := map[string]rulefmt.Rule{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no severity label or no summary", r.Alert)
			}
		}
	}
	for name, wantFor := range map[string]time.Duration{
		"ManifestSyncNotReady": 10 * time.Minute, "ManifestSyncEvaluationFailing": time.Minute,
		"ManifestSyncSourceFailing": 5 * time.Minute, "ManifestSyncSourceNotVerified": 0, "ManifestSyncGitFetchFailing": 5 * time.Minute,
		"ManifestSyncDriftDetected": 0, "ManifestSyncWriteWar": 0, "ManifestSyncConflict": 10 * time.Minute,
		"ManifestSyncObjectsUnhealthy":     15 * time.Minute,
		"ManifestSyncAPIServerUnreachable": 2 * time.Minute, "ManifestSyncOperatorAbsent": 10 * time.Minute,
	} {
		r, ok := alerts[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		if got := time.Duration(r.For); got != wantFor {
			t.Errorf("alert %s fires after %v, want %v", name, got, wantFor)
		}
	}
	if len(alerts) != 11 {
		t.Errorf("%d alerts, want the 11 docs/operations.md lists", len(alerts))
	}
}
