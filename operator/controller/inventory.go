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

// objectKey is the client key of the object id names.
func objectKey(id v1alpha1.ObjectID) client.ObjectKey {
	return client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
}

// inventoryItem is an inventory entry, parsed.
type inventoryItem struct {
	id      v1alpha1.ObjectID
	version string
	target  string
	cluster string // "" for this cluster, else "<kubeconfig secret>/<key>"
	// missing is set when the object was deleted by someone else and
	// left so (drift Report or Ignore).
	missing bool
	// drifted is set when the object was changed by someone else and
	// left so.
	drifted bool
	// fields is the digest of the fields we own in it (ownedFields).
	fields string
}

// describe names the object in messages, with its cluster when remote:
// `Secret web/tls in cluster "prod-eu"`.
func (it inventoryItem) describe() string {
	if it.cluster == "" {
		return it.id.String()
	}
	name, _, _ := strings.Cut(it.cluster, "/")
	return fmt.Sprintf("%s in cluster %q", it.id, name)
}

// clusterObject is an object of one cluster.
type clusterObject struct {
	cluster string // as inventoryItem.cluster
	id      v1alpha1.ObjectID
}

func (it inventoryItem) gvk() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: it.id.Group, Version: it.version, Kind: it.id.Kind}
}

func (it inventoryItem) entry() v1alpha1.InventoryEntry {
	return v1alpha1.InventoryEntry{ID: it.id.InventoryID(), Version: it.version, Target: it.target, Cluster: it.cluster, Missing: it.missing, Drifted: it.drifted, Fields: it.fields}
}

func itemOf(obj *unstructured.Unstructured, target string) inventoryItem {
	return inventoryItem{id: v1alpha1.IDOf(obj), version: obj.GroupVersionKind().Version, target: target}
}

// parseInventory reads ms's inventory (status.inventory or
// status.inventoryGzip); entries that do not parse are dropped (they
// cannot name an object to prune). An inventory that cannot be read is an
// error, never an empty inventory.
func parseInventory(ms *v1alpha1.ManifestSync) ([]inventoryItem, error) {
	entries, err := ms.InventoryEntries()
	if err != nil {
		return nil, err
	}
	items := make([]inventoryItem, 0, len(entries))
	for _, e := range entries {
		id, err := e.Object()
		if err != nil || e.Version == "" {
			continue
		}
		items = append(items, inventoryItem{id: id, version: e.Version, target: e.Target, cluster: e.Cluster, missing: e.Missing, drifted: e.Drifted, fields: e.Fields})
	}
	return items, nil
}

// inventoryEntries is the status form of items, in a stable order and
// without duplicates.
func inventoryEntries(items []inventoryItem) []v1alpha1.InventoryEntry {
	// Each item's id is spelled once, not once per comparison.
	type keyed struct {
		id string
		it inventoryItem
	}
	sorted := make([]keyed, len(items))
	for i, it := range items {
		sorted[i] = keyed{it.id.InventoryID(), it}
	}
	slices.SortFunc(sorted, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.it.target, b.it.target), cmp.Compare(a.it.cluster, b.it.cluster), cmp.Compare(a.id, b.id))
	})
	for i := range sorted {
		items[i] = sorted[i].it
	}
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
