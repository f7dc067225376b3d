package engine_test

import (
	"context"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/lang/kustomize"
)

// A git source at overlays/production, whose overlay names ../../base,
// has the inputs `kustomize build overlays/production` gives over the
// whole repository (lang/kustomize, byte-identical to the kustomize CLI,
// is the oracle): the same objects, in the same order, the target's
// namespace set.
func TestGitPathBuiltInRepository(t *testing.T) {
	root := map[string][]byte{
		"base/kustomization.yaml": []byte("resources: [deployment.yaml, ../shared/cm.yaml]\nlabels:\n- pairs: {app: web}\n"),
		"base/deployment.yaml":    []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers: [{name: web, image: \"nginx:1.27\"}]\n"),
		"shared/cm.yaml":          []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared}\ndata: {a: \"1\"}\n"),
		"overlays/production/kustomization.yaml": []byte("resources: [../../base]\nnamePrefix: prod-\nreplicas:\n- {name: web, count: 3}\n" +
			"configMapGenerator:\n- {name: gen, literals: [b=2]}\n"),
		"overlays/staging/kustomization.yaml": []byte("resources: [../../base]\n"),
		"README.md":                           []byte("# fleet\n"),
	}
	files := map[string][]byte{"kustomization.yaml": root["overlays/production/kustomization.yaml"]}
	spec := engine.Spec{
		Sync: &v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "fleet", Git: &v1alpha1.GitSource{URL: "https://example.com/fleet.git", Path: "overlays/production"}}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: "prod"}},
		},
		Snapshots: map[string]*engine.Snapshot{"fleet": {Revision: "main@sha1:0123456", Files: files, Root: root}},
	}
	res, err := engine.Evaluate(context.Background(), spec, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if got := res.Inputs.Sources["fleet"]; got != "main@sha1:0123456" {
		t.Errorf("revision %q, want the commit's", got)
	}
	out, err := kustomize.Build(root, "overlays/production")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := engine.DecodeDocuments(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, doc := range docs {
		d := doc.Value.(map[string]any)
		d["metadata"].(map[string]any)["namespace"] = "prod"
		want[d["kind"].(string)+"/"+d["metadata"].(map[string]any)["name"].(string)] = mustYAML(t, d)
	}
	objs := res.Targets[0].Objects
	if len(objs) != len(want) || len(want) != 3 {
		t.Errorf("%d objects, kustomize builds %d (want 3)", len(objs), len(want))
	}
	for _, o := range objs {
		if k := o.GetKind() + "/" + o.GetName(); mustYAML(t, o.Object) != want[k] {
			t.Errorf("%s:\n%s\nkustomize builds:\n%s", k, mustYAML(t, o.Object), want[k])
		}
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
