package controller

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
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
	// kept is set when policy Keep left the object as it was, at its
	// last apply: a move does not apply it again (see shard.go). Not in
	// status.
	kept bool
	// fields is the digest of the fields we own in it (ownedFields).
	fields fieldsDigest
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
	return v1alpha1.InventoryEntry{ID: it.id.InventoryID(), Version: it.version, Target: it.target, Cluster: it.cluster, Missing: it.missing, Drifted: it.drifted, Fields: it.fields.String()}
}

func itemOf(obj *unstructured.Unstructured, target string) inventoryItem {
	return inventoryItem{id: v1alpha1.IDOf(obj), version: obj.GroupVersionKind().Version, target: target}
}

// parseInventory reads ms's inventory (status.inventory or
// status.inventoryGzip) whole; entries that do not parse are dropped (they
// cannot name an object to prune). An inventory that cannot be read is an
// error, never an empty inventory.
func parseInventory(ms *v1alpha1.ManifestSync) ([]inventoryItem, error) {
	var items []inventoryItem
	err := eachInventoryItem(ms, func(it inventoryItem) bool {
		items = append(items, it)
		return true
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// eachInventoryItem calls fn with each item of ms's inventory until fn
// returns false, reading a gzipped inventory as a stream; entries that do
// not parse are skipped, as parseInventory drops them. On an error, fn
// may have seen the items before it: what must not act on part of an
// inventory reads it through once first.
func eachInventoryItem(ms *v1alpha1.ManifestSync, fn func(inventoryItem) bool) error {
	stop := errors.New("stop")
	err := ms.EachInventoryEntry(func(e v1alpha1.InventoryEntry) error {
		id, err := e.Object()
		if err != nil || e.Version == "" {
			return nil
		}
		if !fn(inventoryItem{id: id, version: e.Version, target: e.Target, cluster: e.Cluster, missing: e.Missing, drifted: e.Drifted, fields: parseFieldsDigest(e.Fields)}) {
			return stop
		}
		return nil
	})
	if err == stop {
		return nil
	}
	return err
}

// inventoryStream is ms's inventory as its status holds it now, read again
// (as a stream) each time it is ranged over, so that a sync never holds
// the tens of thousands of entries of a fan-out's inventory whole. It
// keeps the inventory's fields, not ms: a status written after does not
// change it. Errors end the items: the caller validated the inventory
// (parseInventory or eachInventoryItem) first.
func inventoryStream(ms *v1alpha1.ManifestSync) iter.Seq[inventoryItem] {
	held := &v1alpha1.ManifestSync{}
	held.Namespace, held.Name = ms.Namespace, ms.Name
	held.Status.Inventory, held.Status.InventoryGzip = ms.Status.Inventory, ms.Status.InventoryGzip
	return func(yield func(inventoryItem) bool) {
		_ = eachInventoryItem(held, yield)
	}
}

// writeInventory writes items to s as its inventory, in a stable order
// (by target, cluster and inventory id) and without duplicates; items are
// sorted in place, and their entries are written one at a time (gzipped
// above threshold bytes of JSON), never all at once.
func writeInventory(s *v1alpha1.ManifestSyncStatus, items []*inventoryItem, threshold int) error {
	slices.SortFunc(items, func(a, b *inventoryItem) int {
		return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.cluster, b.cluster), compareInventoryIDs(a.id, b.id))
	})
	w := v1alpha1.NewInventoryWriter(threshold)
	for i, it := range items {
		if i > 0 && it.target == items[i-1].target && it.cluster == items[i-1].cluster && it.id == items[i-1].id {
			continue
		}
		w.Add(it.entry())
	}
	return w.Close(s)
}

// compareInventoryIDs orders a and b as their InventoryID strings
// compare, without spelling them: a fan-out's inventory sorts tens of
// thousands of them.
func compareInventoryIDs(a, b v1alpha1.ObjectID) int {
	pa := [...]string{a.Namespace, "_", a.Name, "_", a.Group, "_", a.Kind}
	pb := [...]string{b.Namespace, "_", b.Name, "_", b.Group, "_", b.Kind}
	i, j := 0, 0 // the part of each
	var x, y string
	for {
		for x == "" && i < len(pa) {
			x, i = pa[i], i+1
		}
		for y == "" && j < len(pb) {
			y, j = pb[j], j+1
		}
		if x == "" || y == "" {
			return cmp.Compare(len(x), len(y))
		}
		n := min(len(x), len(y))
		if c := strings.Compare(x[:n], y[:n]); c != 0 {
			return c
		}
		x, y = x[n:], y[n:]
	}
}
