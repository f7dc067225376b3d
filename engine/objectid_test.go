package engine

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// TestCollisionsNameObjectsAsObjectID: the engine names objects in
// collisions and errors as v1alpha1.ObjectID does (what inventory, vet,
// diff and the status view print), and the name parses back.
func TestCollisionsNameObjectsAsObjectID(t *testing.T) {
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "web-dev"}}},
		{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "view.x"}}},
	}
	a := &TargetResult{Name: "a", Objects: objs}
	b := &TargetResult{Name: "b", Objects: objs}
	refuseCollisions([]*TargetResult{a, b}, []string{"", ""})
	if len(a.Collisions) != len(objs) {
		t.Fatalf("collisions %+v, want one per object", a.Collisions)
	}
	for i, c := range a.Collisions {
		id := v1alpha1.IDOf(objs[i])
		if c.Object != id.String() {
			t.Errorf("collision names %q, ObjectID %q", c.Object, id)
		}
		back, err := v1alpha1.ParseObjectID(c.Object)
		if id.Group = ""; err != nil || back != id {
			t.Errorf("%q parses as %+v, %v; want %+v", c.Object, back, err, id)
		}
	}
	// Before an object is checked, the same form with stand-ins.
	for want, obj := range map[string]map[string]any{
		"object (no name)":         {},
		`Secret ns/"a\x00b"`:       {"kind": "Secret", "metadata": map[string]any{"name": "a\x00b", "namespace": "ns"}},
		"ConfigMap (no name)":      {"apiVersion": "v1", "kind": "ConfigMap"},
		"ConfigMap web-dev/config": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "config", "namespace": "web-dev"}},
	} {
		if got := describe(&unstructured.Unstructured{Object: obj}); got != want {
			t.Errorf("describe(%v) = %q, want %q", obj, got, want)
		}
	}
}

// Keys of one hash are told apart: with every key hashed alike, the same
// collisions are found, and no others.
func TestCollisionsWithOneHash(t *testing.T) {
	obj := func(kind, ns, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"name": name, "namespace": ns}}}
	}
	targets := func() []*TargetResult {
		return []*TargetResult{
			{Name: "a", Objects: []*unstructured.Unstructured{obj("ConfigMap", "a", "x"), obj("Secret", "shared", "s")}},
			{Name: "b", Objects: []*unstructured.Unstructured{obj("ConfigMap", "b", "x"), obj("Secret", "shared", "s")}},
			{Name: "c", Objects: []*unstructured.Unstructured{obj("ConfigMap", "c", "x"), obj("Secret", "other", "s")}},
			{Name: "d", Cluster: "remote", Objects: []*unstructured.Unstructured{obj("Secret", "shared", "s")}},
		}
	}
	clusters := []string{"", "", "", "remote/kubeconfig"}
	hashed, alike := targets(), targets()
	refuseCollisions(hashed, clusters)
	refuseCollisionsHashed(alike, clusters, func(objectKey) uint64 { return 7 })
	for i := range hashed {
		want := map[string]bool{"a": true, "b": true}[hashed[i].Name]
		if (hashed[i].Err != nil) != want || !reflect.DeepEqual(hashed[i].Collisions, alike[i].Collisions) {
			t.Errorf("target %s: collisions %v with a hash, %v with one for all; error %v", hashed[i].Name, hashed[i].Collisions, alike[i].Collisions, hashed[i].Err)
		}
	}
}
