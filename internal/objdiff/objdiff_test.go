package objdiff

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Secret values are masked on both sides, kubectl's last-applied
// annotation too; other objects are left alone.
func TestMaskSecret(t *testing.T) {
	secret := func(data map[string]any, lastApplied string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "data": data}}
		o.SetName("s")
		if lastApplied != "" {
			o.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": lastApplied, "keep": "me"})
		}
		return o
	}
	live := secret(map[string]any{"same": "c2FtZQ==", "changed": "b2xk", "gone": "Z29uZQ=="}, `{"data":{"same":"c2FtZQ=="}}`)
	desired := secret(map[string]any{"same": "c2FtZQ==", "changed": "bmV3", "added": "YWRkZWQ="}, `{"data":{"same":"c2FtZQ=="}}`)
	l, d := MaskSecret(live, desired)
	wantData := func(o *unstructured.Unstructured, want map[string]any) {
		t.Helper()
		got, _, _ := unstructured.NestedMap(o.Object, "data")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("data %v, want %v", got, want)
		}
	}
	wantData(l, map[string]any{"same": MaskSame, "changed": MaskBefore, "gone": MaskBefore})
	wantData(d, map[string]any{"same": MaskSame, "changed": MaskAfter, "added": MaskAfter})
	if a := l.GetAnnotations(); a["kubectl.kubernetes.io/last-applied-configuration"] != MaskSame || a["keep"] != "me" {
		t.Errorf("annotations %v", a)
	}
	if got, _, _ := unstructured.NestedString(live.Object, "data", "changed"); got != "b2xk" {
		t.Error("MaskSecret changed its argument")
	}
	created, _ := MaskSecret(nil, desired)
	if created != nil {
		t.Error("a missing side is not nil")
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"a": "b"}}}
	if l, _ := MaskSecret(cm, cm); l != cm {
		t.Error("a ConfigMap was masked")
	}
}
