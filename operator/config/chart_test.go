package config_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The Helm chart (operator/chart) is held to the kustomize layout: with its
// default values, released as "manifestsync" into manifestsync-system, it
// renders the layout's objects, but for the Namespace (Helm makes the
// release's namespace: helm install --create-namespace). The tests run
// bin/helm, the Helm CLI pinned by hack/tools/helm (make helm).

const chartDir = "../chart"

// TestChartCRDsAreTheGeneratedOnes checks the chart's crds/ holds exactly
// the CRDs controller-gen writes into crd/bases (make manifests copies
// them), byte for byte.
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	want := readDir(t, "crd/bases")
	got := readDir(t, filepath.Join(chartDir, "crds"))
	if len(want) == 0 {
		t.Fatal("crd/bases holds no CRD")
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s/crds/%s differs from crd/bases/%s: run make manifests", chartDir, name, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/crds/%s is not in crd/bases: run make manifests", chartDir, name)
		}
	}
}

// The chart's alert rules are operator/config/monitoring's, which a test
// checks against the operator's metrics; make manifests copies them.
func TestChartRulesAreTheMonitoringOnes(t *testing.T) {
	want, err := os.ReadFile("monitoring/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "files", "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s/files/prometheus-rules.yaml differs from monitoring/rules.yaml: run make manifests", chartDir)
	}
}

// TestChartRendersTheKustomizeLayout compares, object by object (decoded,
// not as text), what the chart renders with its default values with what
// the kustomize layout builds.
func TestChartRendersTheKustomizeLayout(t *testing.T) {
	compareChartAndLayout(t, renderChart(t, "manifestsync", "manifestsync-system"), build(t, "default"))
}

// With ui.enabled=true the chart renders what the layout builds with the
// web UI's component (ui/): its Service, ClusterRole and binding, and the
// Deployment's flag and port.
func TestChartRendersTheKustomizeLayoutWithUI(t *testing.T) {
	chartObjs := renderChart(t, "manifestsync", "manifestsync-system", "--set", "ui.enabled=true")
	layoutObjs := build(t, "testdata/default-ui")
	compareChartAndLayout(t, chartObjs, layoutObjs)
	checkWiring(t, layoutObjs)
	find(t, layoutObjs, "Service", "manifestsync-ui")
	if args := containerArgs(t, find(t, layoutObjs, "Deployment", "manifestsync")); !slices.Contains(args, "--ui-bind-address=:8090") {
		t.Errorf("the layout with the ui component runs the operator with %v, without --ui-bind-address=:8090", args)
	}
}

// compareChartAndLayout checks that the chart's objects are the layout's,
// but for the layout's Namespace.
func compareChartAndLayout(t *testing.T, chartObjs, layoutObjs []*unstructured.Unstructured) {
	t.Helper()
	chart := byKey(t, chartObjs)
	layout := byKey(t, layoutObjs)

	var namespaces []string
	for k, o := range layout {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o.GetName())
			delete(layout, k)
		}
	}
	if !slices.Equal(namespaces, []string{"manifestsync-system"}) {
		t.Errorf("the layout's namespaces are %v, want [manifestsync-system]", namespaces)
	}
	for k, want := range layout {
		got, ok := chart[k]
		if !ok {
			t.Errorf("the chart renders no %s", k)
			continue
		}
		if !reflect.DeepEqual(got.Object, want.Object) {
			t.Errorf("%s differs:\n--- chart\n%s--- kustomize\n%s", k, toYAML(t, got), toYAML(t, want))
		}
	}
	for k := range chart {
		if _, ok := layout[k]; !ok {
			t.Errorf("the chart renders %s, which the layout has not", k)
		}
	}
}

// TestChartLints runs helm lint --strict (warnings fail) over the chart
// with its default values and with every option on.
func TestChartLints(t *testing.T) {
	for _, values := range [][]string{nil, {"-f", "testdata/chart-values-all.yaml"}} {
		out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, values...)...)
		if err != nil || !strings.Contains(string(out), "0 chart(s) failed") {
			t.Errorf("helm lint --strict %v: %v\n%s", values, err, out)
		}
	}
}

// TestChartAppliesToAPIServer renders the chart with every option on into
// a namespace of its own and applies each object with server-side dry-run;
// a warning of the API server (an unknown or deprecated field) fails it.
// The ServiceMonitor and the PrometheusRule are checked against the
// Prometheus operator's CRDs (testdata/prometheus-operator), installed
// first.
func TestChartAppliesToAPIServer(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	crds := decode(t, slices.Concat(
		readFile(t, "testdata/prometheus-operator/monitoring.coreos.com_servicemonitors.yaml"),
		[]byte("\n---\n"),
		readFile(t, "testdata/prometheus-operator/monitoring.coreos.com_prometheusrules.yaml")))
	for _, crd := range crds {
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(crd), client.ForceOwnership, client.FieldOwner("chart-test")); err != nil {
			t.Fatalf("installing %s: %v", key(crd), err)
		}
	}
	ns := env.Namespace(t, nil)
	objs := renderChart(t, "manifestsync", ns, "-f", "testdata/chart-values-all.yaml")

	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = warnings
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		apply := func() error {
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.ForceOwnership, client.FieldOwner("chart-test"), client.DryRunAll)
		}
		if o.GroupVersionKind().Group == "monitoring.coreos.com" {
			// The CRDs just installed take a moment to be served.
			testenv.Eventually(t, time.Minute, func() error {
				if err := apply(); meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
					return err
				}
				return nil
			})
		}
		if err := apply(); err != nil {
			t.Errorf("%s: %v", key(o), err)
		}
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"CustomResourceDefinition", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "PodDisruptionBudget"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the chart with every option on renders no %s (renders %v)", want, kinds)
		}
	}
	if w := warnings.all(); len(w) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w, "\n"))
	}
}

// TestChartOptions renders the chart with each group of values and checks
// the objects they change.
func TestChartOptions(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := renderChart(t, "manifestsync", "manifestsync-system")
		checkWiring(t, objs)
		args := containerArgs(t, find(t, objs, "Deployment", "manifestsync"))
		if slices.Contains(args, "--allow-kubeconfig-exec") {
			t.Errorf("the operator runs kubeconfigs' exec plugins by default: %v", args)
		}
		// The write gate is on: only the operator's own namespace is
		// trusted (the flag's default), no tenant runs as a default
		// account; the git and helm caches have the flag's default size.
		for _, a := range args {
			if strings.HasPrefix(a, "--ui-bind-address") {
				t.Errorf("the operator serves the web UI by default: %v", args)
			}
			if strings.HasPrefix(a, "--trusted-namespaces") || strings.HasPrefix(a, "--default-service-account") || strings.HasPrefix(a, "--watch-label-selector") ||
				strings.HasPrefix(a, "--git-cache-max-size") || strings.HasPrefix(a, "--helm-cache-max-size") {
				t.Errorf("the operator's args %v set %s by default", args, a)
			}
		}
		// A tenant's Role or RoleBinding, written as the operator, may
		// grant only what the operator holds: the API server's check,
		// which bind or escalate would lift.
		for _, name := range []string{"manifestsync", "manifestsync-apply"} {
			rules, _, _ := unstructured.NestedSlice(find(t, objs, "ClusterRole", name).Object, "rules")
			for _, r := range rules {
				for _, v := range r.(map[string]any)["verbs"].([]any) {
					if v == "bind" || v == "escalate" || v == "*" {
						t.Errorf("ClusterRole %s grants %v by default: %v", name, v, r)
					}
				}
			}
		}
		for _, o := range objs {
			if o.GroupVersionKind().Group == "monitoring.coreos.com" || o.GetName() == "manifestsync-webhook" || o.GetName() == "manifestsync-ui" {
				t.Errorf("%s is rendered though its option is off", key(o))
			}
		}
	})

	// sharding.mode empty (the default) shards when there is more than
	// one replica; auto and off say so whatever the replicas. Sharded,
	// each replica's --shard-id is its pod's name (the downward API), and
	// the operator may write Leases in its namespace.
	t.Run("sharding", func(t *testing.T) {
		for _, c := range []struct {
			set     []string
			sharded bool
		}{
			{nil, true}, // replicas: 2
			{[]string{"replicas=1"}, false},
			{[]string{"replicas=3"}, true},
			{[]string{"replicas=3", "sharding.mode=off"}, false},
			{[]string{"replicas=1", "sharding.mode=auto"}, true},
			{[]string{"replicas=0"}, false},
		} {
			var args []string
			for _, kv := range c.set {
				args = append(args, "--set", kv)
			}
			objs := renderChart(t, "manifestsync", "ops", args...)
			deploy := find(t, objs, "Deployment", "manifestsync")
			containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
			env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
			podName := slices.ContainsFunc(env, func(e any) bool {
				m := e.(map[string]any)
				ref, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
				return m["name"] == "POD_NAME" && ref == "metadata.name"
			})
			args = containerArgs(t, deploy)
			flags := 0
			for _, a := range args {
				if strings.HasPrefix(a, "--shards") {
					flags++
				}
			}
			if sharded := slices.Contains(args, "--shards=auto"); sharded != c.sharded || flags > 1 || podName != c.sharded {
				t.Errorf("--set %v: args %v, POD_NAME %v; want sharded %v", c.set, args, podName, c.sharded)
			}
			// The shard labels' policy comes with sharding.
			policies := 0
			for _, o := range objs {
				if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") && o.GetName() == "manifestsync-shard-labels" {
					policies++
				}
			}
			if want := map[bool]int{true: 2, false: 0}[c.sharded]; policies != want {
				t.Errorf("--set %v: %d shard label policy objects, want %d", c.set, policies, want)
			}
		}
		// It lets the release's service account through, and guards the
		// ManifestSyncs of sharding.labelsPolicySelector, which
		// watchLabelSelector requires; protectLabels=false leaves it out.
		objs := renderChart(t, "manifestsync", "ops")
		expr, _, _ := unstructured.NestedSlice(find(t, objs, "ValidatingAdmissionPolicy", "manifestsync-shard-labels").Object, "spec", "validations")
		if len(expr) != 1 || !strings.Contains(fmt.Sprint(expr[0].(map[string]any)["expression"]), "request.userInfo.username == 'system:serviceaccount:ops:manifestsync'") {
			t.Errorf("the shard label policy's validations %v do not let the operator's service account through", expr)
		}
		if out, err := runHelm(t, "template", "manifestsync", chartDir, "--set", "watchLabelSelector=team=a"); err == nil || !strings.Contains(string(out), "sharding.labelsPolicySelector: with watchLabelSelector set") {
			t.Errorf("watchLabelSelector without sharding.labelsPolicySelector: %v\n%s\nwant a refusal naming it", err, out)
		}
		objs = renderChart(t, "manifestsync", "ops", "--set", "watchLabelSelector=team=a", "--set", "sharding.labelsPolicySelector.matchLabels.team=a")
		sel, _, _ := unstructured.NestedMap(find(t, objs, "ValidatingAdmissionPolicy", "manifestsync-shard-labels").Object, "spec", "matchConstraints", "objectSelector")
		if fmt.Sprint(sel) != "map[matchLabels:map[team:a]]" {
			t.Errorf("the shard label policy selects %v, want sharding.labelsPolicySelector", sel)
		}
		for _, o := range renderChart(t, "manifestsync", "ops", "--set", "sharding.protectLabels=false") {
			if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
				t.Errorf("sharding.protectLabels=false renders %s %s", o.GetKind(), o.GetName())
			}
		}
		objs = renderChart(t, "manifestsync", "ops")
		rules, _, _ := unstructured.NestedSlice(find(t, objs, "Role", "manifestsync-leader-election").Object, "rules")
		leases := false
		for _, r := range rules {
			m := r.(map[string]any)
			verbs := fmt.Sprint(m["verbs"])
			if fmt.Sprint(m["apiGroups"]) == "[coordination.k8s.io]" && fmt.Sprint(m["resources"]) == "[leases]" {
				leases = true
				for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
					if !strings.Contains(verbs, v) {
						t.Errorf("the operator may not %s Leases: %v", v, m)
					}
				}
			}
		}
		if !leases {
			t.Errorf("the leader election Role grants nothing on Leases: %v", rules)
		}
		if find(t, objs, "RoleBinding", "manifestsync-leader-election").GetNamespace() != "ops" {
			t.Error("the Leases' RoleBinding is not in the release's namespace")
		}
	})

	// With more than one replica a PodDisruptionBudget lets a drain evict
	// at most maxUnavailable of them (checkWiring: it selects the pods);
	// with one, or turned off, there is none. The pods spread as told.
	t.Run("disruption budget", func(t *testing.T) {
		for _, c := range []struct {
			set  []string
			want string // maxUnavailable, "" for no PodDisruptionBudget
		}{
			{nil, "1"}, // replicas: 2
			{[]string{"replicas=1"}, ""},
			{[]string{"replicas=4", "podDisruptionBudget.maxUnavailable=2"}, "2"},
			{[]string{"replicas=4", "podDisruptionBudget.maxUnavailable=25%"}, "25%"},
			{[]string{"podDisruptionBudget.enabled=false"}, ""},
		} {
			var args []string
			for _, kv := range c.set {
				args = append(args, "--set", kv)
			}
			objs := renderChart(t, "manifestsync", "ops", args...)
			checkWiring(t, objs)
			var got []string
			for _, o := range objs {
				if o.GetKind() == "PodDisruptionBudget" {
					v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "maxUnavailable")
					got = append(got, fmt.Sprint(v))
				}
			}
			if want := []string{c.want}; (c.want == "" && len(got) != 0) || (c.want != "" && !slices.Equal(got, want)) {
				t.Errorf("%v: PodDisruptionBudgets with maxUnavailable %v, want %q", c.set, got, c.want)
			}
		}
		objs := renderChart(t, "manifestsync", "ops", "-f", "testdata/chart-values-all.yaml")
		spread, _, _ := unstructured.NestedSlice(find(t, objs, "Deployment", "manifestsync").Object, "spec", "template", "spec", "topologySpreadConstraints")
		if len(spread) != 1 || spread[0].(map[string]any)["topologyKey"] != "topology.kubernetes.io/zone" {
			t.Errorf("topologySpreadConstraints %v, want the values' one over zones", spread)
		}
		for _, set := range []string{"podDisruptionBudget.maxUnavailable=-1", "podDisruptionBudget.maxUnavailable=half", "podDisruptionBudget.minAvailable=1"} {
			if out, err := runHelm(t, "template", "manifestsync", chartDir, "--set", set); err == nil {
				t.Errorf("helm template --set %s: no error, want the values schema to refuse it\n%s", set, out)
			}
		}
	})

	t.Run("all on", func(t *testing.T) {
		objs := renderChart(t, "manifestsync", "ops", "-f", "testdata/chart-values-all.yaml")
		checkWiring(t, objs)
		args := containerArgs(t, find(t, objs, "Deployment", "manifestsync"))
		for _, want := range []string{"--eval-workers=3", "--eval-memory-limit=512Mi", "--git-cache-max-size=256Mi", "--helm-cache-max-size=64Mi", "--require-service-account",
			"--instance-id=eu-1", "--watch-label-selector=sharding.fluxcd.io/key in (shard1, shard2)", "--webhook-bind-address=:9443", "--concurrency=8", "--allow-kubeconfig-exec",
			"--trusted-namespaces=ops,platform", "--default-service-account=tenant", "--ui-bind-address=:9090", "--shards=auto"} {
			if !slices.Contains(args, want) {
				t.Errorf("the operator's args %v lack %s", args, want)
			}
		}
		deploy := find(t, objs, "Deployment", "manifestsync")
		if n, _, _ := unstructured.NestedFieldNoCopy(deploy.Object, "spec", "replicas"); fmt.Sprint(n) != "3" {
			t.Errorf("replicas %v, want 3", n)
		}
		containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
		if img := containers[0].(map[string]any)["image"]; img != "registry.example/engine@sha256:"+strings.Repeat("ab", 32) {
			t.Errorf("image %v, want the digest", img)
		}
		// Under sharding.mode auto each replica's --shard-id is its
		// pod's name, from the downward API.
		env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
		if !slices.ContainsFunc(env, func(e any) bool {
			m := e.(map[string]any)
			ref, _, _ := unstructured.NestedString(m, "valueFrom", "fieldRef", "fieldPath")
			return m["name"] == "POD_NAME" && ref == "metadata.name"
		}) {
			t.Errorf("sharding.mode auto: env %v lacks POD_NAME from metadata.name", env)
		}

		// Under --require-service-account the operator writes nothing
		// as itself: the apply role only reads, and the batch kinds
		// are switched off.
		rules, _, _ := unstructured.NestedSlice(find(t, objs, "ClusterRole", "manifestsync-apply").Object, "rules")
		if len(rules) != 5 || fmt.Sprint(rules[4].(map[string]any)["resources"]) != "[poddisruptionbudgets]" {
			t.Errorf("the apply role has rules %v, want 5: core, apps, networking, rbac and the extra one", rules)
		}
		for _, r := range rules {
			r := r.(map[string]any)
			if groups := fmt.Sprint(r["apiGroups"]); groups == "[batch]" {
				t.Errorf("the apply role grants batch though rbac.apply.kinds.batch is false: %v", r)
			}
			for _, v := range r["verbs"].([]any) {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("the apply role grants %v under requireServiceAccount: %v", v, r)
				}
			}
		}

		// The web UI: its Service (ClusterIP, port http-ui) and the
		// rights it needs, which only it does.
		svc := find(t, objs, "Service", "manifestsync-ui")
		if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ClusterIP" {
			t.Errorf("the UI's Service has type %q, want ClusterIP", typ)
		}
		svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if len(svcPorts) != 1 || svcPorts[0].(map[string]any)["name"] != "http-ui" || fmt.Sprint(svcPorts[0].(map[string]any)["port"]) != "9090" {
			t.Errorf("the UI's Service has ports %v, want http-ui on 9090", svcPorts)
		}
		uiRules := toYAML(t, find(t, objs, "ClusterRole", "manifestsync-ui"))
		for _, want := range []string{"tokenreviews", "subjectaccessreviews", "impersonate", "users", "groups", "serviceaccounts", "uids", "userextras/*"} {
			if !strings.Contains(uiRules, want) {
				t.Errorf("the UI's ClusterRole lacks %s:\n%s", want, uiRules)
			}
		}
		if strings.Contains(toYAML(t, find(t, objs, "ClusterRole", "manifestsync")), "tokenreviews") {
			t.Error("the operator's own ClusterRole creates tokenreviews: that is the UI's role's, on only with ui.enabled")
		}

		sm := find(t, objs, "ServiceMonitor", "manifestsync")
		if l := sm.GetLabels()["release"]; l != "prometheus" {
			t.Errorf("the ServiceMonitor's labels %v lack release=prometheus", sm.GetLabels())
		}
		rule := find(t, objs, "PrometheusRule", "manifestsync")
		groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
		var names []string
		for _, g := range groups {
			g := g.(map[string]any)
			names = append(names, fmt.Sprint(g["name"]))
			rs, _ := g["rules"].([]any)
			if len(rs) == 0 {
				t.Errorf("rule group %v has no rules", g["name"])
			}
			for _, r := range rs {
				r := r.(map[string]any)
				if r["expr"] == nil || (r["alert"] == nil) == (r["record"] == nil) {
					t.Errorf("rule %v needs an expr and one of alert or record", r)
				}
			}
		}
		if !slices.Equal(names, []string{"manifestsync", "mine"}) {
			t.Errorf("rule groups %v, want the chart's (manifestsync) and the extra one (mine)", names)
		}
		if !strings.Contains(toYAML(t, rule), "manifestsync_failures_total") {
			t.Error("the PrometheusRule does not alert on manifestsync_failures_total")
		}
	})

	t.Run("release name", func(t *testing.T) {
		objs := renderChart(t, "team-a", "team-a-system", "--set", "rbac.apply.enabled=false")
		checkWiring(t, objs)
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(o.GetName(), "team-a-manifestsync") {
				t.Errorf("%s is not named after the release", key(o))
			}
			if strings.HasSuffix(o.GetName(), "-apply") {
				t.Errorf("%s is rendered though rbac.apply.enabled is false", key(o))
			}
		}
	})

	t.Run("schema", func(t *testing.T) {
		for _, set := range []string{"instanceID=Not_An_ID", "replica=3", "evalWorkers=0", "image.digest=latest",
			"gitCacheMaxSize=lots", "helmCacheMaxSize=lots", "defaultServiceAccount=Not_An_Account", "trustedNamespaces={Team_A}", "ui.port=0", "ui.bind=:80"} {
			if out, err := runHelm(t, "template", "manifestsync", chartDir, "--set", set); err == nil {
				t.Errorf("helm template --set %s: no error, want the values schema to refuse it\n%s", set, out)
			}
		}
	})
}

// checkWiring checks that the objects hold together: every binding names
// the Deployment's service account, and every Service and ServiceMonitor
// selects the operator's pods through a port they have.
func checkWiring(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	var deploy *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			deploy = o
		}
	}
	if deploy == nil {
		t.Fatal("no Deployment")
	}
	spec, _, _ := unstructured.NestedMap(deploy.Object, "spec", "template", "spec")
	podLabels, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")
	var ports []string
	for _, p := range spec["containers"].([]any)[0].(map[string]any)["ports"].([]any) {
		ports = append(ports, fmt.Sprint(p.(map[string]any)["name"]))
	}
	services := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRoleBinding", "RoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != spec["serviceAccountName"] || subjects[0].(map[string]any)["namespace"] != deploy.GetNamespace() {
				t.Errorf("%s binds %v, not the operator's service account %s/%v", key(o), subjects, deploy.GetNamespace(), spec["serviceAccountName"])
			}
			roleName, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			roleKind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
			if !slices.ContainsFunc(objs, func(r *unstructured.Unstructured) bool { return r.GetKind() == roleKind && r.GetName() == roleName }) {
				t.Errorf("%s binds %s %s, which is not rendered", key(o), roleKind, roleName)
			}
		case "PodDisruptionBudget":
			selector, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
			if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)) {
				t.Errorf("%s selects %v, not the operator's pods %v", key(o), selector, podLabels)
			}
		case "ServiceAccount":
			if o.GetName() != spec["serviceAccountName"] {
				t.Errorf("%s is not the operator's service account %v", key(o), spec["serviceAccountName"])
			}
		case "Service":
			services[o.GetName()] = o
			selector, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector")
			if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)) {
				t.Errorf("%s selects %v, not the operator's pods %v", key(o), selector, podLabels)
			}
			svcPorts, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
			for _, p := range svcPorts {
				if target := fmt.Sprint(p.(map[string]any)["targetPort"]); !slices.Contains(ports, target) {
					t.Errorf("%s targets port %s; the operator's container has %v", key(o), target, ports)
				}
			}
		}
		if o.GetNamespace() != "" && o.GetNamespace() != deploy.GetNamespace() {
			t.Errorf("%s is not in the operator's namespace %s", key(o), deploy.GetNamespace())
		}
	}
	if _, ok := services[deploy.GetName()+"-metrics"]; !ok {
		t.Errorf("no metrics Service %s-metrics", deploy.GetName())
	}
	for _, sm := range objs {
		if sm.GetKind() != "ServiceMonitor" {
			continue
		}
		selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		var selected []string
		for name, svc := range services {
			if labels.SelectorFromSet(selector).Matches(labels.Set(svc.GetLabels())) {
				selected = append(selected, name)
				svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
				for _, e := range endpoints {
					port := e.(map[string]any)["port"]
					if !slices.ContainsFunc(svcPorts, func(p any) bool { return p.(map[string]any)["name"] == port }) {
						t.Errorf("%s scrapes port %v, which Service %s has not", key(sm), port, name)
					}
				}
			}
		}
		if !slices.Equal(selected, []string{deploy.GetName() + "-metrics"}) {
			t.Errorf("%s selects Services %v, want only the metrics Service", key(sm), selected)
		}
		if len(endpoints) == 0 {
			t.Errorf("%s has no endpoints", key(sm))
		}
	}
}

// TestLayoutWiring holds the kustomize layout to the chart's checks of how
// its objects refer to each other.
func TestLayoutWiring(t *testing.T) {
	checkWiring(t, build(t, "default"))
}

func containerArgs(t *testing.T, deploy *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// renderChart runs helm template for a release into namespace ns, the
// CRDs included.
func renderChart(t *testing.T, release, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, chartDir, "--namespace", ns, "--include-crds"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return decode(t, out)
}

// runHelm runs bin/helm with its own empty configuration, cache and data
// directories, and returns its combined output.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	bin := helmBinary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

var helmBuild struct {
	once sync.Once
	path string
	err  error
}

// helmBinary is the checkout's bin/helm, built by make helm when it is
// missing (make test builds it first). Under -short, the tests that
// need it are skipped.
func helmBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs bin/helm (make helm); skipped under -short")
	}
	helmBuild.once.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			helmBuild.err = err
			return
		}
		helmBuild.path = filepath.Join(root, "bin", "helm")
		if _, err := os.Stat(helmBuild.path); err == nil {
			return
		}
		cmd := exec.Command("make", "helm")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			helmBuild.err = fmt.Errorf("bin/helm is missing, and building it (make helm) failed: %w\n%s", err, out)
		}
	})
	if helmBuild.err != nil {
		t.Fatal(helmBuild.err)
	}
	return helmBuild.path
}

// warningRecorder keeps the warnings of the API server's responses.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.warnings)
}

func key(o *unstructured.Unstructured) string {
	id := o.GetName()
	if o.GetNamespace() != "" {
		id = o.GetNamespace() + "/" + id
	}
	return o.GetAPIVersion() + " " + o.GetKind() + " " + id
}

// byKey indexes objects by key, failing on a duplicate.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := m[key(o)]; dup {
			t.Errorf("%s twice", key(o))
		}
		m[key(o)] = o
	}
	return m
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		files[e.Name()] = readFile(t, filepath.Join(dir, e.Name()))
	}
	return files
}

func toYAML(t *testing.T, o *unstructured.Unstructured) string {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
