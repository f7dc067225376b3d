package controller

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// policyScript makes one ConfigMap per entry of ctx.params.objects, with
// the policy annotation when one is given.
const policyScript = `
def main(ctx):
    out = []
    for name, spec in ctx.params["objects"].items():
        md = {"name": name}
        if spec.get("policy"):
            md["annotations"] = {"manifestsync.dev/policy": spec["policy"]}
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {"a": "ours"}}
        if spec.get("immutable"):
            cm["immutable"] = True
        out.append(cm)
    return out
`

// Each resource policy against objects that exist already, written by
// another field manager.
func TestResourcePolicies(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	theirs := func(name string, immutable bool) *corev1.ConfigMap {
		ac := corev1ac.ConfigMap(name, ns).WithData(map[string]string{"a": "theirs", "extra": "x"})
		if immutable {
			ac.WithImmutable(true)
		}
		if err := env.Client.Apply(ctx, ac, client.FieldOwner("someone-else")); err != nil {
			t.Fatal(err)
		}
		return mustConfigMap(t, ns, name)
	}
	for _, name := range []string{"sync", "keep", "adopt", "overwrite"} {
		theirs(name, false)
	}
	immutable := theirs("immutable", true)

	ms := newSync(home, "policies", v1alpha1.ManifestSyncSpec{
		Transform: inline(policyScript),
		Params: params(`{"objects": {
			"sync": {}, "keep": {"policy": "Keep"}, "adopt": {"policy": "Adopt"},
			"overwrite": {"policy": "Overwrite"}, "immutable": {"policy": "Overwrite", "immutable": true},
			"new": {}, "new-kept": {"policy": "Keep"}}}`),
		Targets: targets(ns),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonConflict)

	// Sync: someone else's object is a conflict, left alone.
	if cm := mustConfigMap(t, ns, "sync"); cm.Data["a"] != "theirs" || cm.Labels[OwnerLabel] != "" {
		t.Errorf("Sync touched the conflicting object: %v %v", cm.Labels, cm.Data)
	}
	msg := condition(got, v1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "ConfigMap "+ns+"/sync exists and is not managed by this ManifestSync") {
		t.Errorf("Ready message %q does not name the conflict", msg)
	}
	if c := condition(got, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonConflict {
		t.Errorf("Stalled = %+v", c)
	}
	if row := got.Status.Targets[0]; row.State != v1alpha1.TargetConflict || !strings.Contains(row.Message, ns+"/sync") {
		t.Errorf("target row %+v", row)
	}
	waitEvent(t, ms, EventConflict, ns+"/sync")

	// Keep: an existing object is never modified; an absent one is created.
	if cm := mustConfigMap(t, ns, "keep"); cm.Data["a"] != "theirs" || cm.Labels[OwnerLabel] != "" {
		t.Errorf("Keep modified the object: %v %v", cm.Labels, cm.Data)
	}
	configMapWith(t, timeout, ms, ns, "new-kept", "a", "ours")
	configMapWith(t, timeout, ms, ns, "new", "a", "ours")

	// Adopt: ours now, others' fields stay.
	if cm := configMapWith(t, timeout, ms, ns, "adopt", "a", "ours"); cm.Data["extra"] != "x" {
		t.Errorf("Adopt removed another manager's field: %v", cm.Data)
	}

	// Overwrite: exactly ours; others' fields are gone.
	if cm := configMapWith(t, timeout, ms, ns, "overwrite", "a", "ours"); len(cm.Data) != 1 {
		t.Errorf("Overwrite left other fields: %v", cm.Data)
	} else if managers := testenv.FieldManagers(cm); !slices.Equal(managers, []string{FieldManager}) {
		t.Errorf("field managers after Overwrite: %v", managers)
	}

	// Overwrite of an immutable object recreates it.
	if cm := configMapWith(t, timeout, ms, ns, "immutable", "a", "ours"); cm.UID == immutable.UID || len(cm.Data) != 1 {
		t.Errorf("immutable object not recreated: uid %s (was %s), data %v", cm.UID, immutable.UID, cm.Data)
	}

	var ids []string
	for _, e := range entriesOf(t, got) {
		ids = append(ids, strings.TrimPrefix(e.ID, ns+"_"))
	}
	want := []string{"adopt__ConfigMap", "immutable__ConfigMap", "new-kept__ConfigMap", "new__ConfigMap", "overwrite__ConfigMap"}
	if !slices.Equal(ids, want) {
		t.Errorf("inventory %v, want %v", ids, want)
	}

	// The conflict is resolved by adopting the object.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Policy.Resources = v1alpha1.PolicyAdopt
	})
	ready(t, ms)
	configMapWith(t, timeout, ms, ns, "sync", "a", "ours")
	if cm := mustConfigMap(t, ns, "keep"); cm.Data["a"] != "theirs" {
		t.Errorf("the object's Keep annotation lost to spec.policy: %v", cm.Data)
	}
}

// TestConflictRetry: while one object of a target conflicts, the retries
// apply nothing that was applied already and has not changed since; what
// changed in between is applied again, and the target syncs once the
// conflict is gone.
func TestConflictRetry(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	if err := env.Client.Apply(ctx, corev1ac.ConfigMap("taken", ns).WithData(map[string]string{"a": "theirs"}), client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "retry", v1alpha1.ManifestSyncSpec{
		Transform: inline(policyScript),
		Params:    params(`{"objects": {"taken": {}, "mine": {}}}`),
		Targets:   targets(ns),
	})
	createSync(t, ms)
	waitFor(t, ms, v1alpha1.ReasonConflict)
	configMapWith(t, timeout, ms, ns, "mine", "a", "ours")

	applies := func(do func()) float64 {
		t.Helper()
		before, err := env.Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		do()
		after, err := env.Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return after.Sub(before).Count(func(r testenv.Request) bool {
			return r.Verb == "APPLY" && r.Resource == "configmaps" && !r.DryRun
		})
	}
	retry := func() {
		t.Helper()
		for range 3 {
			if _, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)}); err == nil {
				t.Fatal("a retry of a target in conflict succeeded")
			}
		}
	}
	if n := applies(retry); n != 0 {
		t.Errorf("3 retries applied %v ConfigMaps, want none: mine is applied already and taken conflicts", n)
	}

	// Someone changes mine: the next retry puts it back.
	cm := mustConfigMap(t, ns, "mine")
	cm.Data["a"] = "changed"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	configMapWith(t, timeout, ms, ns, "mine", "a", "ours")

	// The conflict goes away: the target syncs.
	if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"}}); err != nil {
		t.Fatal(err)
	}
	ready(t, ms)
	configMapWith(t, timeout, ms, ns, "taken", "a", "ours")
}
