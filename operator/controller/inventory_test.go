package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// testGzipThreshold is the test operator's InventoryGzipThreshold.
const testGzipThreshold = 2 << 10

// An inventory larger than the threshold is written gzipped, with its
// count; pruning reads it so; once small again it is written plain.
func TestLargeInventoryIsGzipped(t *testing.T) {
	env.Need(t)
	ms, got, nss := syncFifty(t, "gzipped")
	if len(got.Status.Inventory) != 0 || len(got.Status.InventoryGzip) == 0 || got.Status.InventoryCount != 50 {
		t.Fatalf("status: %d plain entries, %d gzipped bytes, count %d; want 0, some, 50",
			len(got.Status.Inventory), len(got.Status.InventoryGzip), got.Status.InventoryCount)
	}
	if n := len(entriesOf(t, got)); n != 50 {
		t.Fatalf("the gzipped inventory has %d entries, want 50", n)
	}

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"names": ["c0", "c1"]}`) })
	got = ready(t, ms)
	for _, ns := range nss {
		for i := 2; i < 10; i++ {
			eventually(t, timeout, func() error {
				return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%d", i)}})
			})
		}
		mustConfigMap(t, ns, "c1")
	}
	if len(got.Status.Inventory) != 10 || got.Status.InventoryGzip != nil || got.Status.InventoryCount != 0 {
		t.Errorf("status: %d plain entries, %d gzipped bytes, count %d; want 10, none, 0",
			len(got.Status.Inventory), len(got.Status.InventoryGzip), got.Status.InventoryCount)
	}
}

// A corrupt status.inventoryGzip fails the sync with InventoryInvalid:
// it is not read as an empty inventory, and nothing is pruned.
func TestCorruptInventoryPrunesNothing(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "corrupt", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["a", "b"]}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	got := ready(t, ms)
	quiet(t)
	orig := got.DeepCopy()
	got.Status.Inventory, got.Status.InventoryGzip, got.Status.InventoryCount = nil, []byte("not gzip"), 2
	if err := env.Client.Status().Patch(ctx, got, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"names": ["a"]}`) })
	failed := waitFor(t, ms, v1alpha1.ReasonInventoryInvalid)
	c := condition(failed, v1alpha1.ConditionReady)
	for _, want := range []string{"ManifestSync " + home + "/corrupt", "status.inventoryGzip", "nothing was applied or pruned"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Ready message %q does not say %q", c.Message, want)
		}
	}
	mustConfigMap(t, ns, "b")
	if string(failed.Status.InventoryGzip) != "not gzip" {
		t.Errorf("the corrupt inventory was rewritten: %q", failed.Status.InventoryGzip)
	}
}
