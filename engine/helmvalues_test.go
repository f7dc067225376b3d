package engine_test

import (
	"context"
	"testing"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/helm"
)

// A source read only for a helm source's values files (Argo CD's
// $values/... of a source with a ref, as engine import writes it) adds no
// objects of its own, though it holds manifests of other apps.
func TestHelmValuesSourceAddsNoObjects(t *testing.T) {
	sf, err := engine.LoadSyncFile("sync.yaml", []byte(`apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: shop, namespace: ops}
spec:
  sources:
  - name: charts
    git: {url: https://example.com/charts.git}
  - name: values
    git: {url: https://example.com/values.git}
  - name: app
    helm:
      source: charts
      path: app
      includeCRDs: false
      valuesFrom:
      - {source: values, path: envs/prod.yaml}
  targets:
  - {name: prod, namespace: prod}
`))
	if err != nil {
		t.Fatal(err)
	}
	charts := chartRepo()
	values := map[string][]byte{
		"envs/prod.yaml": []byte("size: large\ncolor: green\n"),
		"apps/cm.yaml":   []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other-app}\n"),
	}
	snaps := map[string]*engine.Snapshot{
		"charts": {Files: charts, Revision: engine.ContentDigest(charts)},
		"values": {Files: values, Revision: engine.ContentDigest(values)},
	}
	res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps, Name: sf.Sync.Name}, engine.Options{Helm: helm.Renderer{}})
	if err != nil {
		t.Fatal(err)
	}
	objs := byKindName(t, res.Targets[0])
	if len(objs) != 1 {
		t.Fatalf("%d objects, want the chart's ConfigMap alone: %v", len(objs), objs)
	}
	data, _ := objs["ConfigMap/shop-cfg"]["data"].(map[string]any)
	if data["size"] != "large" || data["color"] != "green" {
		t.Errorf("the values file was not read: %v", data)
	}
}
