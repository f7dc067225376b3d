package worker

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/stdlib"
)

// fakeRenderer renders any chart as one ConfigMap that shows what it was
// asked: release, namespace, kube version.
type fakeRenderer struct{}

func (fakeRenderer) RenderChart(_ context.Context, c stdlib.HelmChart) ([]stdlib.HelmManifest, error) {
	y := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  namespace: %s\n  kube: %s\n", c.Release, c.Namespace, c.Capabilities.KubeVersion)
	return []stdlib.HelmManifest{{Name: "chart/templates/cm.yaml", Content: []byte(y)}}, nil
}

// TestHelmInWorker: a worker renders the charts of an evaluation with its
// own renderer (ServeOptions.Helm), given the ManifestSync's name and the
// capabilities; a worker whose renders outlive their deadline
// (ServeOptions.Stuck) retires after its answer, and the next evaluation
// gets a fresh worker instead of an error.
func TestHelmInWorker(t *testing.T) {
	p, err := New(Options{Command: []string{os.Args[0]}, Env: []string{workerEnv + "=helm"}, Workers: 1, MemoryLimit: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	chart := map[string][]byte{"Chart.yaml": []byte("apiVersion: v2\nname: c\nversion: 1.0.0\n")}
	spec := engine.Spec{
		Name: "shop",
		Sync: &v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", Helm: &v1alpha1.HelmSource{Chart: "c", Repository: "https://example.com"}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: "dev"}},
		},
		Snapshots: map[string]*engine.Snapshot{"app": {Revision: "c@1.0.0@sha256:0", Files: chart}},
	}
	opts := engine.Options{Helm: fakeRenderer{}, Capabilities: engine.HelmCapabilities{KubeVersion: "v1.30.1"}}
	for i := range 2 {
		res, err := p.Evaluate(context.Background(), spec, opts)
		if err != nil {
			t.Fatalf("evaluation %d: %v", i, err)
		}
		tr := res.Targets[0]
		if tr.Err != nil || len(tr.Objects) != 1 {
			t.Fatalf("evaluation %d: %v, %d objects", i, tr.Err, len(tr.Objects))
		}
		o := tr.Objects[0]
		if o.GetName() != "shop" || fmt.Sprint(o.Object["data"]) != "map[kube:v1.30.1 namespace:dev]" {
			t.Errorf("evaluation %d: %v", i, o.Object)
		}
		p.mu.Lock()
		live := len(p.live)
		p.mu.Unlock()
		if live != 0 {
			t.Errorf("evaluation %d: %d workers live after a retiring answer", i, live)
		}
	}
	opts.Helm = nil
	res, err := p.Evaluate(context.Background(), spec, opts)
	if err != nil || res.Targets[0].Err == nil {
		t.Errorf("a parent without a renderer had the worker render: %v", err)
	}
}
