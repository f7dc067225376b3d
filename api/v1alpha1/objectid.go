package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ObjectID names an object independently of its API version. People read
// it as "Kind namespace/name" ("Kind name" for a cluster-scoped object),
// which String returns; status.inventory stores it as
// "namespace_name_group_Kind", which InventoryID returns and
// ParseInventoryID reads back. None of the parts can hold "_" (they are
// DNS names and a kind), so the inventory form parses back unambiguously.
//
// +kubebuilder:object:generate=false
type ObjectID struct {
	Namespace, Name, Group, Kind string
}

// IDOf is the identity of obj.
func IDOf(obj *unstructured.Unstructured) ObjectID {
	gvk := obj.GroupVersionKind()
	return ObjectID{Namespace: obj.GetNamespace(), Name: obj.GetName(), Group: gvk.Group, Kind: gvk.Kind}
}

// String names the object for people: "Deployment web-dev/web",
// "Namespace web-dev".
func (id ObjectID) String() string {
	if id.Namespace == "" {
		return id.Kind + " " + id.Name
	}
	return id.Kind + " " + id.Namespace + "/" + id.Name
}

// ParseObjectID reads the form String writes: "Kind namespace/name" or,
// for a cluster-scoped object, "Kind name". The group is not part of it.
func ParseObjectID(s string) (ObjectID, error) {
	kind, rest, ok := strings.Cut(s, " ")
	if !ok || kind == "" || rest == "" || strings.ContainsAny(kind, "/_") || strings.Contains(rest, " ") {
		return ObjectID{}, fmt.Errorf("object %q: want \"Kind namespace/name\" or \"Kind name\"", s)
	}
	ns, name, namespaced := strings.Cut(rest, "/")
	if !namespaced {
		return ObjectID{Name: rest, Kind: kind}, nil
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return ObjectID{}, fmt.Errorf("object %q: want \"Kind namespace/name\" or \"Kind name\"", s)
	}
	return ObjectID{Namespace: ns, Name: name, Kind: kind}, nil
}

// InventoryID is the form status.inventory stores:
// "web-dev_web_apps_Deployment".
func (id ObjectID) InventoryID() string {
	return id.Namespace + "_" + id.Name + "_" + id.Group + "_" + id.Kind
}

// ParseInventoryID reads the id of an inventory entry.
func ParseInventoryID(s string) (ObjectID, error) {
	parts := strings.Split(s, "_")
	if len(parts) != 4 || parts[1] == "" || parts[3] == "" {
		return ObjectID{}, fmt.Errorf("inventory id %q: want namespace_name_group_Kind", s)
	}
	return ObjectID{Namespace: parts[0], Name: parts[1], Group: parts[2], Kind: parts[3]}, nil
}

// Object is the identity of the entry's object.
func (e InventoryEntry) Object() (ObjectID, error) {
	return ParseInventoryID(e.ID)
}
