package applier

import (
	"encoding/base64"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/engine"
)

// mergeStringData merges a Secret's stringData into data as the API
// server does (base64, stringData winning), in a copy; anything else, and
// a Secret the API server would refuse, is left as it is.
func TestMergeStringData(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	secret := func(fields map[string]any) *unstructured.Unstructured {
		obj := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}}
		for k, v := range fields {
			obj[k] = v
		}
		return &unstructured.Unstructured{Object: obj}
	}
	for _, tc := range []struct {
		name    string
		in      *unstructured.Unstructured
		changed bool
		data    map[string]any
	}{
		{"stringData only", secret(map[string]any{"stringData": map[string]any{"a": "x y"}}), true, map[string]any{"a": b64("x y")}},
		{"stringData wins", secret(map[string]any{"data": map[string]any{"a": b64("old"), "b": b64("kept")}, "stringData": map[string]any{"a": "new"}}), true,
			map[string]any{"a": b64("new"), "b": b64("kept")}},
		{"empty stringData", secret(map[string]any{"stringData": map[string]any{}}), true, nil},
		{"data only", secret(map[string]any{"data": map[string]any{"a": b64("x")}}), false, map[string]any{"a": b64("x")}},
		{"not a string", secret(map[string]any{"stringData": map[string]any{"a": int64(1)}}), false, nil},
		{"not a map", secret(map[string]any{"stringData": "a"}), false, nil},
		{"ConfigMap", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "stringData": map[string]any{"a": "b"}}}, false, nil},
		{"other group", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Secret", "stringData": map[string]any{"a": "b"}}}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.in.DeepCopy()
			out, changed := mergeStringData(tc.in)
			if !reflect.DeepEqual(tc.in, orig) {
				t.Fatalf("the input changed: %v", tc.in.Object)
			}
			if changed != tc.changed {
				t.Fatalf("changed %v, want %v", changed, tc.changed)
			}
			if !changed {
				if out != tc.in {
					t.Errorf("an unchanged object was copied")
				}
				return
			}
			if _, ok := out.Object["stringData"]; ok {
				t.Errorf("stringData kept: %v", out.Object)
			}
			data, _ := out.Object["data"].(map[string]any)
			if tc.data == nil && data != nil || tc.data != nil && !reflect.DeepEqual(data, tc.data) {
				t.Errorf("data %v, want %v", data, tc.data)
			}
			if out.GetName() != "s" {
				t.Errorf("metadata lost: %v", out.Object)
			}
		})
	}
	// AsApplied keeps the engine's digest for anything it does not change.
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}}}
	if obj, d := AsApplied(cm, "sha256:engine"); obj != cm || d != "sha256:engine" {
		t.Errorf("AsApplied of a ConfigMap: %v, %q", obj, d)
	}
	s := secret(map[string]any{"stringData": map[string]any{"a": "x"}})
	if obj, d := AsApplied(s, "sha256:engine"); d != engine.ObjectDigest(obj.Object) {
		t.Errorf("AsApplied of a Secret: digest %q, want the object's", d)
	}
}
