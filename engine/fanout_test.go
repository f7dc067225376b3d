package engine_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Without a transform, every target's copy of an input shares the parts
// normalize leaves alone (a Secret's data) with the input and the other
// targets, so that a fan-out holds each body once; what normalize or a
// patch changes is the target's own, and the inputs stay as they were.
func TestFanOutSharesWhatNoTargetChanges(t *testing.T) {
	inputs := func() []map[string]any {
		sec := secret("platform", "token", "u1", "7", "c2VjcmV0LXZhbHVl")
		sec["metadata"].(map[string]any)["labels"] = map[string]any{"replicate": "yes"}
		sec["metadata"].(map[string]any)["annotations"] = map[string]any{
			"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "platform"}
		svc := map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"namespace": "platform", "name": "api", "uid": "u2", "resourceVersion": "8"},
			"spec":     map[string]any{"clusterIP": "10.0.0.7", "ports": []any{map[string]any{"port": int64(80)}}},
			"status":   map[string]any{"loadBalancer": map[string]any{}},
		}
		return []map[string]any{sec, svc}
	}
	snap, before := engine.ObjectSetSnapshot(inputs()), engine.ObjectSetSnapshot(inputs())
	var sec map[string]any
	for _, o := range snap.Objects {
		if o["kind"] == "Secret" {
			sec = o
		}
	}

	spec := &v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "set", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", Namespace: "platform"}}},
		Targets: []v1alpha1.Target{
			{Name: "a", Namespace: "a"},
			{Name: "b", Namespace: "b"},
			{Name: "patched", Namespace: "c", Patches: []v1alpha1.Patch{{Patch: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  labels:\n    replicate: patched\ndata:\n  v: b3RoZXI=\n"}}},
		},
	}
	res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: spec, Snapshots: map[string]*engine.Snapshot{"set": snap}}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	byTarget := map[string]map[string]map[string]any{} // target -> kind -> object
	for _, tr := range res.Targets {
		byTarget[tr.Name] = map[string]map[string]any{}
		for _, o := range tr.Objects {
			byTarget[tr.Name][o.GetKind()] = o.Object
			if o.GetNamespace() != tr.Namespace {
				t.Errorf("target %s: %s in namespace %q", tr.Name, o.GetName(), o.GetNamespace())
			}
		}
	}
	a, b, c := byTarget["a"]["Secret"], byTarget["b"]["Secret"], byTarget["patched"]["Secret"]
	if reflect.ValueOf(a["data"]).Pointer() != reflect.ValueOf(b["data"]).Pointer() ||
		reflect.ValueOf(a["data"]).Pointer() != reflect.ValueOf(sec["data"]).Pointer() {
		t.Errorf("the unpatched targets' Secret data is copied per target, not shared with the input")
	}
	if got := c["data"].(map[string]any)["v"]; got != "b3RoZXI=" {
		t.Errorf("patched target: data.v %v", got)
	}
	if got := a["data"].(map[string]any)["v"]; got != "c2VjcmV0LXZhbHVl" {
		t.Errorf("the patch of another target shows in target a: data.v %v", got)
	}
	if got := a["metadata"].(map[string]any)["labels"].(map[string]any)["replicate"]; got != "yes" {
		t.Errorf("the patch of another target shows in target a: label %v", got)
	}
	if _, ok := a["metadata"].(map[string]any)["annotations"].(map[string]any)["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Errorf("target a keeps the last-applied annotation")
	}
	for name, objs := range byTarget {
		spec := objs["Service"]["spec"].(map[string]any)
		if _, ok := spec["clusterIP"]; ok {
			t.Errorf("target %s: the Service keeps its allocated clusterIP", name)
		}
		if _, ok := objs["Service"]["status"]; ok {
			t.Errorf("target %s: the Service keeps its status", name)
		}
	}
	if !reflect.DeepEqual(snap.Objects, before.Objects) {
		t.Errorf("the evaluation changed its inputs:\n got %v\nwant %v", snap.Objects, before.Objects)
	}
}

// Options.Compact keeps no objects of the targets made of the inputs
// themselves, and Manifests makes exactly the objects an evaluation
// without it keeps; a patched target keeps its own; a collision between
// two such targets is found all the same.
func TestCompactMakesTheSameObjectsAgain(t *testing.T) {
	snap := engine.ObjectSetSnapshot([]map[string]any{
		secret("platform", "token", "u1", "7", "c2VjcmV0LXZhbHVl"),
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "platform", "name": "cfg", "uid": "u2", "resourceVersion": "8"}, "data": map[string]any{"k": "v"}},
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "extra", "uid": "u3", "resourceVersion": "9"}},
		{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"namespace": "platform", "name": "db", "uid": "u4", "resourceVersion": "10"},
			"spec": map[string]any{"clusterIP": "10.0.0.7", "clusterIPs": []any{"10.0.0.7"}, "ports": []any{map[string]any{"port": int64(5432)}}}},
	})
	spec := &v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "set", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", Namespace: "platform"}}},
		Targets: []v1alpha1.Target{
			{Name: "a", Namespace: "a"},
			{Name: "b", Namespace: "b"},
			{Name: "patched", Namespace: "c", Patches: []v1alpha1.Patch{{Patch: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  k: other\n"}}},
		},
	}
	in := engine.Spec{Sync: spec, Snapshots: map[string]*engine.Snapshot{"set": snap}}
	kept, err := engine.Evaluate(context.Background(), in, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	compact, err := engine.Evaluate(context.Background(), in, engine.Options{Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if kept.Revision != compact.Revision {
		t.Errorf("revision %s kept, %s compact", kept.Revision, compact.Revision)
	}
	for i, want := range kept.Targets {
		got := compact.Targets[i]
		// The Namespace object is cluster-scoped: every target writes it,
		// and every target fails for the collision, kept or not.
		if (want.Err == nil) != (got.Err == nil) || (want.Err != nil && want.Err.Error() != got.Err.Error()) {
			t.Errorf("target %s: error %v kept, %v compact", want.ID(), want.Err, got.Err)
		}
		if !reflect.DeepEqual(want.Collisions, got.Collisions) {
			t.Errorf("target %s: collisions %v kept, %v compact", want.ID(), want.Collisions, got.Collisions)
		}
	}
	// Without the cluster-scoped object, no collision: compare objects.
	var namespaced []map[string]any
	for _, o := range snap.Objects {
		if o["kind"] != "Namespace" {
			namespaced = append(namespaced, o)
		}
	}
	in.Snapshots["set"] = engine.ObjectSetSnapshot(namespaced)
	before, err := json.Marshal(in.Snapshots["set"].Objects)
	if err != nil {
		t.Fatal(err)
	}
	if kept, err = engine.Evaluate(context.Background(), in, engine.Options{}); err != nil {
		t.Fatal(err)
	}
	if compact, err = engine.Evaluate(context.Background(), in, engine.Options{Compact: true}); err != nil {
		t.Fatal(err)
	}
	// The compact evaluation makes its copies in maps it uses again,
	// target after target, and never writes the inputs'.
	if after, _ := json.Marshal(in.Snapshots["set"].Objects); string(after) != string(before) {
		t.Errorf("the inputs changed:\n%s\nwas\n%s", after, before)
	}
	for i, want := range kept.Targets {
		got := compact.Targets[i]
		if want.Err != nil || got.Err != nil {
			t.Fatalf("target %s: %v, %v", want.ID(), want.Err, got.Err)
		}
		if got.Len() != len(want.Objects) || got.Digest != want.Digest || want.Name == "patched" && !reflect.DeepEqual(got.Digests, want.Digests) {
			t.Errorf("target %s: %d objects, digest %s compact; %d, %s kept", want.ID(), got.Len(), got.Digest, len(want.Objects), want.Digest)
		}
		if want.Name == "patched" {
			if got.Objects == nil {
				t.Errorf("the patched target's objects were not kept")
			}
		} else if got.Objects != nil {
			t.Errorf("target %s: objects kept with Compact", want.ID())
		}
		objs, err := got.Manifests()
		if err != nil {
			t.Fatal(err)
		}
		for j := range want.Objects {
			if !reflect.DeepEqual(objs[j].Object, want.Objects[j].Object) {
				t.Errorf("target %s, object %d: made again\n%v\nkept\n%v", want.ID(), j, objs[j].Object, want.Objects[j].Object)
			}
		}
		full, err := got.WithManifests()
		if err != nil || full.Objects == nil || full.Digest != got.Digest || !reflect.DeepEqual(full.Digests, want.Digests) {
			t.Errorf("target %s: WithManifests: %v, %d objects, digests %v, want %v", want.ID(), err, len(full.Objects), full.Digests, want.Digests)
		}
		if want.Name != "patched" && got.Digests != nil {
			t.Errorf("target %s: digests of each object kept with Compact", want.ID())
		}
	}
}
