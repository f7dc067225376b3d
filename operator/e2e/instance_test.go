package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// secrets is a transform making the Secrets params.names into the target,
// each with data {from: params.from} (base64).
const secrets = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n}, "data": {"from": ctx.params["from"]}}
            for n in ctx.params["names"]]
`

func secretSync(ns string, target string, from string, names ...string) *v1alpha1.ManifestSync {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: secrets}},
			Params:    &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"from": %q, "names": [%s]}`, from, strings.Join(quoted, ","))},
			Targets:   []v1alpha1.Target{{Name: "shared", Namespace: target}},
			Interval:  &metav1.Duration{Duration: time.Hour},
		},
	}
}

func getSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Two operators with distinct instance ids, each with its ManifestSync
// web, sync the same Secret into one shared namespace: the first to create
// it owns it, the other reports a Conflict naming it and writes nothing,
// however often both resync; each prunes only its own objects.
func TestInstancesDoNotFight(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	homeA, homeB, shared := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	startOperator(t, controller.Options{InstanceID: "a"}, homeA)
	startOperator(t, controller.Options{InstanceID: "b"}, homeB)

	a := secretSync(homeA, shared, "YQ==", "common", "only-a") // "a"
	keyA := client.ObjectKeyFromObject(a)
	createSync(t, a)
	waitFor(t, keyA, v1alpha1.ReasonSynced)
	common := getSecret(t, shared, "common")
	if got := common.Labels[controller.OwnerLabel]; got != homeA+".web_a" {
		t.Errorf("owner label %q, want %s.web_a", got, homeA)
	}
	if got := testenv.FieldManagers(common); !slices.Equal(got, []string{"manifestsync-a"}) {
		t.Errorf("field managers %v, want [manifestsync-a]", got)
	}

	b := secretSync(homeB, shared, "Yg==", "common", "only-b") // "b"
	keyB := client.ObjectKeyFromObject(b)
	createSync(t, b)
	got := waitFor(t, keyB, v1alpha1.ReasonConflict)
	if msg := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "belongs to ManifestSync "+homeA+"/web of operator instance a") {
		t.Errorf("B's conflict: %s", msg)
	}
	if s := getSecret(t, shared, "only-b"); s.Labels[controller.OwnerLabel] != homeB+".web_b" {
		t.Errorf("only-b's owner label: %q", s.Labels[controller.OwnerLabel])
	}

	// Both resync again and again (B also retries its conflict with
	// backoff): the shared Secret is written no more, and the writes stay
	// bounded.
	rv := getSecret(t, shared, "common").ResourceVersion
	reqs, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		requestSync(t, keyA)
		requestSync(t, keyB)
		time.Sleep(300 * time.Millisecond)
	}
	now, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secretWrites := now.Sub(reqs).Count(func(r testenv.Request) bool { return r.Write() && r.Resource == "secrets" })
	if s := getSecret(t, shared, "common"); s.ResourceVersion != rv || string(s.Data["from"]) != "a" {
		t.Errorf("the shared Secret changed: resourceVersion %s -> %s, from=%q", rv, s.ResourceVersion, s.Data["from"])
	}
	// B's target is not synced, so each of its retries applies its own
	// Secret again (a no-op apply, one request); nothing else is written.
	t.Logf("%v Secret writes while both resynced 5 times", secretWrites)
	if secretWrites > 15 {
		t.Errorf("%v writes of Secrets while both resynced, want at most one per retry of B", secretWrites)
	}
	waitFor(t, keyA, v1alpha1.ReasonSynced)
	waitFor(t, keyB, v1alpha1.ReasonConflict)

	// A gives the Secret up: it prunes it, as its own; B, retrying, takes
	// it.
	updateSpec(t, keyA, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Params = &runtime.RawExtension{Raw: []byte(`{"from": "YQ==", "names": ["only-a"]}`)}
	})
	waitFor(t, keyB, v1alpha1.ReasonSynced)
	eventually(t, timeout, func() error {
		s := getSecret(t, shared, "common")
		if s.Labels[controller.OwnerLabel] != homeB+".web_b" || string(s.Data["from"]) != "b" {
			return fmt.Errorf("common: owner %q, from=%q", s.Labels[controller.OwnerLabel], s.Data["from"])
		}
		return nil
	})

	// A wants it back: now it is A's conflict, and deleting A prunes only
	// what is A's.
	updateSpec(t, keyA, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Params = &runtime.RawExtension{Raw: []byte(`{"from": "YQ==", "names": ["common", "only-a"]}`)}
	})
	waitFor(t, keyA, v1alpha1.ReasonConflict)
	if err := env.Client.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, absent(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: shared, Name: "only-a"}}))
	eventually(t, timeout, absent(&v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: homeA, Name: "web"}}))
	if s := getSecret(t, shared, "common"); s.Labels[controller.OwnerLabel] != homeB+".web_b" || string(s.Data["from"]) != "b" {
		t.Errorf("deleting A touched B's Secret: owner %q, from=%q", s.Labels[controller.OwnerLabel], s.Data["from"])
	}
	getSecret(t, shared, "only-b")
	waitFor(t, keyB, v1alpha1.ReasonSynced)
}

// updateSpec changes a ManifestSync, retrying on conflicts with the
// operators' writes.
func updateSpec(t *testing.T, key client.ObjectKey, change func(*v1alpha1.ManifestSync)) {
	t.Helper()
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), key, cur); err != nil {
			return err
		}
		change(cur)
		return env.Client.Update(context.Background(), cur)
	})
}
