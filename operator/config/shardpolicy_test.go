package config_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The layout's (and chart's) shard label policy, created for real: a
// tenant who may edit ManifestSyncs, and a cluster admin, may create and
// change them, but not set, change or remove the labels
// shard.manifestsync.dev/owner and /drain, which the API server refuses
// with the policy's message; the operator's service account may.
//
// What a hostile tenant gets: no way to pin its ManifestSyncs to a
// replica, put one with two replicas, or make the replicas move them
// (and apply their objects again) in a loop.
func TestShardLabelsPolicy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	var policy []*unstructured.Unstructured
	for _, o := range build(t, "default") {
		if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
			policy = append(policy, o)
		}
	}
	if len(policy) != 2 {
		t.Fatalf("the layout has %d ValidatingAdmissionPolicy objects, want the policy and its binding", len(policy))
	}
	for _, o := range policy {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	ns := env.Namespace(t, nil)
	const operator = "system:serviceaccount:manifestsync-system:manifestsync"
	if err := env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit-syncs"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"manifestsyncs"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edit-syncs"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "edit-syncs"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operator}}}); err != nil {
		t.Fatal(err)
	}
	tenant, op, admin := env.ClientAs(t, "tenant"), env.ClientAs(t, operator), env.Client
	sync := func(name string, labels map[string]string) *v1alpha1.ManifestSync {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: v1alpha1.ManifestSyncSpec{Params: &runtime.RawExtension{Raw: []byte(`{}`)}, Targets: []v1alpha1.Target{{Name: "here", Namespace: ns}}}}
	}
	refused := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "shard.manifestsync.dev/owner and shard.manifestsync.dev/drain of a ManifestSync are the operator's")
	}
	// The policy takes effect a moment after it is created.
	testenv.Eventually(t, time.Minute, func() error {
		err := tenant.Create(ctx, sync("pinned", map[string]string{shard.OwnerLabel: "replica-0"}))
		if !refused(err) {
			if err == nil {
				_ = admin.Delete(ctx, sync("pinned", nil))
			}
			return &policyError{err}
		}
		return nil
	})
	mine := sync("mine", map[string]string{"team": "a"})
	if err := tenant.Create(ctx, mine); err != nil {
		t.Fatalf("a tenant's ManifestSync without shard labels: %v", err)
	}
	relabel := func(c client.Client, labels map[string]string, drop ...string) error {
		cur := &v1alpha1.ManifestSync{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mine), cur); err != nil {
			return err
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for k, v := range labels {
			cur.Labels[k] = v
		}
		for _, k := range drop {
			delete(cur.Labels, k)
		}
		return c.Update(ctx, cur)
	}
	if err := relabel(op, map[string]string{shard.OwnerLabel: "replica-0"}); err != nil {
		t.Fatalf("the operator assigns: %v", err)
	}
	for _, u := range []struct {
		name string
		c    client.Client
	}{{"tenant", tenant}, {"admin", admin}} { // in this order: the admin's team label is the last
		name, c := u.name, u.c
		if err := relabel(c, map[string]string{shard.OwnerLabel: "replica-1"}); !refused(err) {
			t.Errorf("%s changes the owner label: %v, want the policy's refusal", name, err)
		}
		if err := relabel(c, nil, shard.OwnerLabel); !refused(err) {
			t.Errorf("%s removes the owner label: %v, want the policy's refusal", name, err)
		}
		if err := relabel(c, map[string]string{shard.DrainLabel: "replica-1"}); !refused(err) {
			t.Errorf("%s sets the drain label: %v, want the policy's refusal", name, err)
		}
		if err := relabel(c, map[string]string{"team": name}); err != nil {
			t.Errorf("%s changes another label: %v", name, err)
		}
	}
	if err := relabel(op, map[string]string{shard.DrainLabel: "replica-1"}); err != nil {
		t.Errorf("the operator drains: %v", err)
	}
	if err := relabel(op, map[string]string{shard.OwnerLabel: "replica-1"}, shard.DrainLabel); err != nil {
		t.Errorf("the operator moves: %v", err)
	}
	got := &v1alpha1.ManifestSync{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(mine), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[shard.OwnerLabel] != "replica-1" || got.Labels["team"] != "admin" {
		t.Errorf("labels %v, want the operator's owner and the admin's team", got.Labels)
	}
}

type policyError struct{ err error }

func (e *policyError) Error() string {
	return "a tenant created a ManifestSync with an owner label: " + errString(e.err) + "; want the policy's refusal"
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
