package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// objectID names an object independently of its API version, as the
// inventory stores it: "<namespace>_<name>_<group>_<Kind>". None of the
// parts can hold "_" (they are DNS names and a kind), so it parses back.
type objectID struct {
	Namespace, Name, Group, Kind string
}

func idOf(obj *unstructured.Unstructured) objectID {
	gvk := obj.GroupVersionKind()
	return objectID{Namespace: obj.GetNamespace(), Name: obj.GetName(), Group: gvk.Group, Kind: gvk.Kind}
}

func (id objectID) String() string {
	return id.Namespace + "_" + id.Name + "_" + id.Group + "_" + id.Kind
}

// describe names the object in messages: "Secret web/tls".
func (id objectID) describe() string {
	if id.Namespace == "" {
		return id.Kind + " " + id.Name
	}
	return id.Kind + " " + id.Namespace + "/" + id.Name
}

func (id objectID) key() client.ObjectKey {
	return client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
}

func parseID(s string) (objectID, error) {
	parts := strings.Split(s, "_")
	if len(parts) != 4 || parts[1] == "" || parts[3] == "" {
		return objectID{}, fmt.Errorf("inventory id %q: want namespace_name_group_Kind", s)
	}
	return objectID{Namespace: parts[0], Name: parts[1], Group: parts[2], Kind: parts[3]}, nil
}

// inventoryItem is an inventory entry, parsed.
type inventoryItem struct {
	id      objectID
	version string
	target  string
	cluster string // "" for this cluster, else "<kubeconfig secret>/<key>"
	// missing is set when the object was deleted by someone else and
	// left so (drift Report or Ignore).
	missing bool
}

// describe names the object in messages, with its cluster when remote:
// `Secret web/tls in cluster "prod-eu"`.
func (it inventoryItem) describe() string {
	if it.cluster == "" {
		return it.id.describe()
	}
	name, _, _ := strings.Cut(it.cluster, "/")
	return fmt.Sprintf("%s in cluster %q", it.id.describe(), name)
}

// clusterObject is an object of one cluster.
type clusterObject struct {
	cluster string // as inventoryItem.cluster
	id      objectID
}

func (it inventoryItem) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: it.id.Group, Version: it.version, Kind: it.id.Kind}
}

func (it inventoryItem) entry() v1alpha1.InventoryEntry {
	return v1alpha1.InventoryEntry{ID: it.id.String(), Version: it.version, Target: it.target, Cluster: it.cluster, Missing: it.missing}
}

func itemOf(obj *unstructured.Unstructured, target string) inventoryItem {
	return inventoryItem{id: idOf(obj), version: obj.GroupVersionKind().Version, target: target}
}

// parseInventory reads status.inventory; entries that do not parse are
// dropped (they cannot name an object to prune).
func parseInventory(entries []v1alpha1.InventoryEntry) []inventoryItem {
	items := make([]inventoryItem, 0, len(entries))
	for _, e := range entries {
		id, err := parseID(e.ID)
		if err != nil || e.Version == "" {
			continue
		}
		items = append(items, inventoryItem{id: id, version: e.Version, target: e.Target, cluster: e.Cluster, missing: e.Missing})
	}
	return items
}

// inventoryEntries is the status form of items, in a stable order and
// without duplicates.
func inventoryEntries(items []inventoryItem) []v1alpha1.InventoryEntry {
	slices.SortFunc(items, func(a, b inventoryItem) int {
		return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.id.String(), b.id.String()))
	})
	items = slices.CompactFunc(items, func(a, b inventoryItem) bool {
		return a.target == b.target && a.cluster == b.cluster && a.id == b.id
	})
	if len(items) == 0 {
		return nil
	}
	out := make([]v1alpha1.InventoryEntry, len(items))
	for i, it := range items {
		out[i] = it.entry()
	}
	return out
}
