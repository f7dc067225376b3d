package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// An object's identity reads as "Kind namespace/name" and goes through
// the inventory's form and back.
func TestObjectID(t *testing.T) {
	for _, tc := range []struct {
		obj            map[string]any
		people, invent string
	}{
		{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "web-dev"}},
			"Deployment web-dev/web", "web-dev_web_apps_Deployment"},
		{map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "view.x"}},
			"ClusterRole view.x", "_view.x_rbac.authorization.k8s.io_ClusterRole"},
		{map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "tls", "namespace": "a"}},
			"Secret a/tls", "a_tls__Secret"},
	} {
		id := IDOf(&unstructured.Unstructured{Object: tc.obj})
		if id.String() != tc.people || id.InventoryID() != tc.invent {
			t.Errorf("%v: %q, %q; want %q, %q", tc.obj, id.String(), id.InventoryID(), tc.people, tc.invent)
		}
		back, err := (InventoryEntry{ID: id.InventoryID()}).Object()
		if err != nil || back != id {
			t.Errorf("%s: parsed back as %+v, %v", tc.invent, back, err)
		}
	}
	for _, bad := range []string{"", "bad", "a_b__", "a__g_Kind", "a_b_c_d_e"} {
		if id, err := ParseInventoryID(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, id)
		}
	}
}

// The people's form parses back to the same identity, but for the group,
// which it does not carry.
func TestParseObjectID(t *testing.T) {
	for _, id := range []ObjectID{
		{Namespace: "web-dev", Name: "web", Group: "apps", Kind: "Deployment"},
		{Name: "view.x", Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
		{Namespace: "a", Name: "tls", Kind: "Secret"},
	} {
		back, err := ParseObjectID(id.String())
		id.Group = ""
		if err != nil || back != id {
			t.Errorf("%s: parsed back as %+v, %v", id, back, err)
		}
	}
	for _, bad := range []string{"", "Deployment", "Deployment ", " web", "Deployment a/", "Deployment /b", "Deployment a/b/c", "Deployment a b", "apps/Deployment a/b"} {
		if id, err := ParseObjectID(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, id)
		}
	}
}
