package controller

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// gadgetChart is a chart with a CRD in crds/ and, in its templates, a CR
// of that CRD and a ConfigMap that shows the values and what the chart
// saw of the cluster.
var gadgetChart = map[string]string{
	"charts/gadgets/Chart.yaml":  "apiVersion: v2\nname: gadgets\nversion: 2.0.0\n",
	"charts/gadgets/values.yaml": "size: small\n",
	"charts/gadgets/crds/gadgets.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.h2.example.com
spec:
  group: h2.example.com
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: string}
`,
	"charts/gadgets/templates/gadget.yaml": `apiVersion: h2.example.com/v1
kind: Gadget
metadata:
  name: {{ .Release.Name }}
spec:
  size: {{ .Values.size }}
`,
	"charts/gadgets/templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-seen
data:
  size: {{ .Values.size | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  apps: {{ .Capabilities.APIVersions.Has "apps/v1/Deployment" | quote }}
`,
}

// A chart inside a git repository ({source: repo, path: charts/gadgets})
// with a CRD in crds/ and a CR of it syncs in one reconcile: one
// evaluation and no failure (the CRD goes first and is established before
// the CR is applied), with the values given and the capabilities of the
// cluster (its version, its API versions with kinds, as Helm asks).
func TestHelmChartWithCRDsSyncsInOneReconcile(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	gitCache, helmCache := NewGitCache(git.Options{}), NewHelmCache(charts.Options{Timeout: 20 * time.Second})
	mctx, cancel := context.WithCancel(context.Background())
	mgr, r, err := newOperator(mctx, &testenv.Env{Config: remoteEnv.Config, Scheme: remoteEnv.Scheme})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r.Git, r.Helm = gitCache.Provider, helmCache.Provider
	stop, err := testenv.StartManager(mctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	content := t.TempDir()
	for p, s := range gadgetChart {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(content, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(content, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	gittest.Publish(t, root, "charts", content)
	url := gittest.Daemon(t, root) + "/charts.git"

	ns := remoteEnv.Namespace(t, nil)
	ms := newSync(ns, "gizmo", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: url}},
			{Name: "gadgets", Helm: &v1alpha1.HelmSource{Source: "repo", Path: "charts/gadgets", Values: &runtime.RawExtension{Raw: []byte(`{"size": "large"}`)}}},
		},
		Targets: targets(ns),
	})
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = remoteEnv.Client.Delete(context.Background(), ms)
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName("gadgets.h2.example.com")
		_ = remoteEnv.Client.Delete(context.Background(), crd)
	})
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, time.Minute)
	if n := evaluations(t, ns, ms.Name); n != 1 {
		t.Errorf("synced after %d evaluations, want 1", n)
	}
	if failed := seriesLabels(t, failuresTotal, prometheus.Labels{"namespace": ns}); len(failed) != 0 {
		t.Errorf("failures before the sync: %v; events: %v", failed, warnings(t, remoteEnv.Client, ms))
	}
	if rev := got.Status.Inputs.Sources["gadgets"]; rev == "" {
		t.Errorf("no revision of the chart in status.inputs: %v", got.Status.Inputs.Sources)
	}

	gadget := &unstructured.Unstructured{}
	gadget.SetAPIVersion("h2.example.com/v1")
	gadget.SetKind("Gadget")
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gizmo"}, gadget); err != nil {
		t.Fatalf("the chart's Gadget: %v", err)
	}
	if size, _, _ := unstructured.NestedString(gadget.Object, "spec", "size"); size != "large" {
		t.Errorf("the Gadget's size %q, want the values' large", size)
	}
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gizmo-seen"}, cm); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(remoteEnv.Config)
	if err != nil {
		t.Fatal(err)
	}
	version, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["kube"] != version.GitVersion || cm.Data["apps"] != "true" {
		t.Errorf("the chart saw %v; want the cluster's version %s and apps/v1/Deployment", cm.Data, version.GitVersion)
	}

	// The same chart evaluated in a worker process (params evalWorker):
	// the worker renders it with the capabilities the operator found.
	// The CRD is the first ManifestSync's.
	off := false
	ns2 := remoteEnv.Namespace(t, nil)
	inWorker := newSync(ns2, "widget", v1alpha1.ManifestSyncSpec{
		Params: &runtime.RawExtension{Raw: []byte(`{"evalWorker": true}`)},
		Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: url}},
			{Name: "gadgets", Helm: &v1alpha1.HelmSource{Source: "repo", Path: "charts/gadgets", IncludeCRDs: &off}},
		},
		Targets: targets(ns2),
	})
	if err := remoteEnv.Client.Create(ctx, inWorker); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remoteEnv.Client.Delete(context.Background(), inWorker) })
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(inWorker), v1alpha1.ReasonSynced, time.Minute)
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns2, Name: "widget-seen"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["kube"] != version.GitVersion || cm.Data["size"] != "small" {
		t.Errorf("rendered in a worker, the chart saw %v", cm.Data)
	}
}

// evaluations is how many times the operator evaluated the ManifestSync
// ns/name.
func evaluations(t *testing.T, ns, name string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := evalDuration.WithLabelValues(ns, name).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
