package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// namesScript makes a ConfigMap for each name in ctx.params.names; the one
// named "kept" opts out of pruning.
const namesScript = `
def main(ctx):
    out = []
    for name in ctx.params["names"]:
        md = {"name": name}
        if name == "kept":
            md["annotations"] = {"manifestsync.dev/prune": "disabled"}
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {"target": ctx.target.name}})
    return out
`

// Removing a target prunes its objects, except those that opt out; an
// object that lost our label is no longer ours to prune.
func TestPrune(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, a, b := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "prune", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["plain", "kept", "detached"]}`),
		Targets:   targets(a, b),
	})
	createSync(t, ms)
	got := ready(t, ms)
	if n := len(entriesOf(t, got)); n != 6 {
		t.Fatalf("inventory has %d entries, want 6: %+v", n, entriesOf(t, got))
	}

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Targets = ms.Spec.Targets[:1] })
	got = ready(t, ms)
	eventually(t, timeout, func() error {
		return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: "plain"}})
	})
	eventually(t, timeout, func() error {
		return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: "detached"}})
	})
	mustConfigMap(t, b, "kept")
	for _, e := range entriesOf(t, got) {
		if e.Target != "t0" {
			t.Errorf("inventory still holds %+v", e)
		}
	}
	waitEvent(t, ms, EventPruned, "ConfigMap "+b+"/plain")

	// Someone takes a's "detached" over by removing our label; when it is
	// no longer desired it stays.
	cm := mustConfigMap(t, a, "detached")
	delete(cm.Labels, OwnerLabel)
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"names": ["plain"]}`) })
	got = ready(t, ms)
	mustConfigMap(t, a, "detached")
	mustConfigMap(t, a, "kept")
	if len(entriesOf(t, got)) != 1 || !strings.HasPrefix(entriesOf(t, got)[0].ID, a+"_plain_") {
		t.Errorf("inventory %+v", entriesOf(t, got))
	}

	// A renamed target writes the same object: the old target's entry
	// goes, the object is not pruned (nor deleted and made again).
	before := mustConfigMap(t, a, "plain")
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Targets[0].Name = "renamed" })
	got = ready(t, ms)
	if after := mustConfigMap(t, a, "plain"); after.UID != before.UID {
		t.Errorf("the object of a renamed target was deleted and made again")
	}
	if inv := entriesOf(t, got); len(inv) != 1 || inv[0].Target != "renamed" {
		t.Errorf("inventory after renaming the target: %+v", inv)
	}
}

// Deleting a ManifestSync deletes its objects (deletion Delete) or leaves
// them without our label (Orphan); objects that opt out of pruning are
// orphaned either way.
func TestDeletionPolicies(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, a, b := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	syncs := map[v1alpha1.DeletionPolicy]*v1alpha1.ManifestSync{}
	for _, p := range []v1alpha1.DeletionPolicy{v1alpha1.DeletionDelete, v1alpha1.DeletionOrphan} {
		names := `["orphan"]`
		if p == v1alpha1.DeletionDelete {
			names = `["delete", "kept"]`
		}
		ms := newSync(home, strings.ToLower(string(p)), v1alpha1.ManifestSyncSpec{
			Transform: inline(namesScript),
			Params:    params(`{"names": ` + names + `}`),
			Targets:   targets(a, b),
			Policy:    v1alpha1.Policy{Deletion: p},
		})
		createSync(t, ms)
		syncs[p] = ms
	}
	for _, ms := range syncs {
		ready(t, ms)
		if err := env.Client.Delete(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	for _, ms := range syncs {
		eventually(t, timeout, func() error { return gone(&v1alpha1.ManifestSync{ObjectMeta: ms.ObjectMeta}) })
	}
	for _, ns := range []string{a, b} {
		if err := gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "delete"}}); err != nil {
			t.Errorf("deletion Delete: %v", err)
		}
		// Orphaned, and kept from pruning: left without our marks.
		for _, name := range []string{"orphan", "kept"} {
			cm := mustConfigMap(t, ns, name)
			if _, ok := cm.Labels[OwnerLabel]; ok {
				t.Errorf("%s keeps our label: %v", name, cm.Labels)
			}
			if _, ok := cm.Annotations[DigestAnnotation]; ok {
				t.Errorf("%s keeps our annotation: %v", name, cm.Annotations)
			}
		}
	}
}
