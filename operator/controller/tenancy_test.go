package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// tenantTransform renders a ConfigMap for the target "config" and a Secret
// for the target "secret".
const tenantTransform = `
def main(ctx):
    if ctx.target.name == "secret":
        return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"token": "t"}}]
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}}]
`

// With spec.serviceAccountName, writes are made as the account: a target
// of Secrets it may not write fails as Forbidden and writes nothing, a
// target of ConfigMaps it may write syncs; granted Secrets, the first
// target syncs too.
func TestServiceAccountImpersonated(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "deployer"}}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "deployer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "deployer"}},
	}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	ms := newSync(home, "tenant", v1alpha1.ManifestSyncSpec{
		Transform:          inline(tenantTransform),
		Targets:            []v1alpha1.Target{{Name: "config", Namespace: target}, {Name: "secret", Namespace: target}},
		ServiceAccountName: "deployer",
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonApplyFailed)
	if r := row(got, "config"); r.State != v1alpha1.TargetSynced {
		t.Errorf("config row = %+v", r)
	}
	r := row(got, "secret")
	if r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, "forbidden") ||
		!strings.Contains(r.Message, `"system:serviceaccount:`+home+`:deployer"`) {
		t.Errorf("secret row = %+v, want Failed and forbidden to the account", r)
	}
	configMapWith(t, timeout, ms, target, "cfg", "k", "v")
	if err := env.Client.Get(ctx, keyOf(target, "creds"), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret %s/creds: %v, want NotFound", target, err)
	}

	// RBAC grants Secrets: the failed target is retried and syncs.
	eventually(t, timeout, func() error {
		cur := &rbacv1.Role{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(role), cur); err != nil {
			return err
		}
		cur.Rules[0].Resources = []string{"configmaps", "secrets"}
		return env.Client.Update(ctx, cur)
	})
	ready(t, ms)
	eventually(t, timeout, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, keyOf(target, "creds"), s); err != nil {
			return err
		}
		if s.Labels[OwnerLabel] != reconciler.Options.owner(ms) {
			return fmt.Errorf("Secret labels %v", s.Labels)
		}
		return nil
	})
}

// An object source is read as the account too: one it may not read fails
// the source.
func TestServiceAccountReadsSources(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "tls"}, Data: map[string][]byte{"k": []byte("v")}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "reader", v1alpha1.ManifestSyncSpec{
		Sources:            []v1alpha1.Source{{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}}},
		Targets:            targets(target),
		ServiceAccountName: "nobody",
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonSourceFailed)
	if c := condition(got, v1alpha1.ConditionReady); !strings.Contains(c.Message, "forbidden") {
		t.Errorf("Ready = %+v, want forbidden", c)
	}
}

func TestRequireServiceAccount(t *testing.T) {
	r := &Reconciler{Options: Options{RequireServiceAccount: true}}
	ms := newSync("ns", "x", v1alpha1.ManifestSyncSpec{})
	if err := r.checkTenancy(ms); !errors.Is(err, errServiceAccountRequired) {
		t.Errorf("checkTenancy without an account: %v", err)
	}
	if _, err := r.localCluster(ms); !errors.Is(err, errServiceAccountRequired) {
		t.Errorf("localCluster without an account: %v", err)
	}
	setConditions(ms, v1alpha1.ReasonServiceAccountRequired, errServiceAccountRequired.Error())
	if c := condition(ms, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue {
		t.Errorf("Stalled = %+v", c)
	}
	ms.Spec.ServiceAccountName = "deployer"
	if err := r.checkTenancy(ms); err != nil {
		t.Errorf("checkTenancy with an account: %v", err)
	}
}

// TestGitCredentialsReadAsServiceAccount: the Secret a git source's
// secretRef names is read as the ManifestSync's service account, so that a
// tenant cannot use credentials its account may not read.
func TestGitCredentialsReadAsServiceAccount(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "puller"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "git-auth"}, Data: map[string][]byte{"password": []byte("pw")}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	ms := newSync(home, "pull", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://kustomize", SecretRef: &v1alpha1.LocalObjectReference{Name: "git-auth"}}},
			{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", Path: "base"}},
		},
		Targets:            targets(target),
		ServiceAccountName: "puller",
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonSourceFailed)
	c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if !strings.Contains(c.Message, "secretRef "+home+"/git-auth") || !strings.Contains(c.Message, "forbidden") ||
		!strings.Contains(c.Message, `"system:serviceaccount:`+home+`:puller"`) {
		t.Errorf("Ready message %q, want the secretRef forbidden to the account", c.Message)
	}

	// The account may read its Secret and write ConfigMaps where it syncs.
	grant := func(ns, resource string, verbs ...string) {
		t.Helper()
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller-" + resource},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: verbs}},
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller-" + resource},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "puller"}},
		}
		for _, obj := range []client.Object{role, binding} {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	grant(home, "secrets", "get")
	grant(target, "configmaps", "get", "list", "watch", "create", "update", "patch", "delete")
	// The failed source is retried with backoff.
	ready(t, ms)
	configMapWith(t, timeout, ms, target, "cfg", "env", "base")
}
