package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Who writes through the gate: a ManifestSync of a namespace that is not
// trusted and runs as no service account. The zero Options trust no
// namespace, so that a reconciler made without thought is gated.
func TestGatedModes(t *testing.T) {
	sync := func(ns, account string) *v1alpha1.ManifestSync {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Spec: v1alpha1.ManifestSyncSpec{ServiceAccountName: account}}
	}
	for _, c := range []struct {
		name        string
		opts        Options
		ms          *v1alpha1.ManifestSync
		wantAccount string
		wantGated   bool
	}{
		{"zero options: gated", Options{}, sync("team-a", ""), "", true},
		{"own account", Options{}, sync("team-a", "deployer"), "deployer", false},
		{"trusted namespace", Options{TrustedNamespaces: []string{"platform"}}, sync("platform", ""), "", false},
		{"another namespace than the trusted", Options{TrustedNamespaces: []string{"platform"}}, sync("team-a", ""), "", true},
		{"every namespace trusted", Options{TrustedNamespaces: []string{"*"}}, sync("team-a", ""), "", false},
		{"default account", Options{DefaultServiceAccount: "tenant"}, sync("team-a", ""), "tenant", false},
		{"own account over the default", Options{DefaultServiceAccount: "tenant"}, sync("team-a", "deployer"), "deployer", false},
		{"trusted runs as the operator despite the default account",
			Options{TrustedNamespaces: []string{"platform"}, DefaultServiceAccount: "tenant"}, sync("platform", ""), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.opts.serviceAccount(c.ms); got != c.wantAccount {
				t.Errorf("serviceAccount = %q, want %q", got, c.wantAccount)
			}
			if got := c.opts.gated(c.ms); got != c.wantGated {
				t.Errorf("gated = %v, want %v", got, c.wantGated)
			}
		})
	}
}

// A hostile annotation value does not widen what it allows: only a whole
// entry naming the namespace, or "*", allows it.
func TestAllowsFrom(t *testing.T) {
	for _, c := range []struct {
		value, from string
		want        bool
	}{
		{"", "team-a", false},
		{"team-a", "team-a", true},
		{"team-b, team-a", "team-a", true},
		{" * ", "team-a", true},
		{"team-ab", "team-a", false},
		{"team", "team-a", false},
		{"team-a*", "team-a", false},
		{"team-b", "team-a", false},
	} {
		if got := allowsFrom(c.value, c.from); got != c.want {
			t.Errorf("allowsFrom(%q, %q) = %v, want %v", c.value, c.from, got, c.want)
		}
	}
}

// A refusal names the reason, each refused object, and says nothing was
// applied; a sync whose only failures are refusals waits (no quick retry),
// one with another failure is retried as before.
func TestNotAllowedOutcomes(t *testing.T) {
	na := &notAllowedError{reasons: []string{`Secret kube-system/x: namespace "kube-system" does not allow writes from "team-a" (annotation manifestsync.dev/allow-from)`}}
	msg := fmt.Errorf("target %q: %w", "t", na).Error()
	for _, want := range []string{v1alpha1.ReasonTargetNotAllowed + ": ", "Secret kube-system/x", AllowFromAnnotation, "nothing of the target was applied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	target := &engine.TargetResult{Name: "t"}
	refused := &targetOutcome{target: target, err: fmt.Errorf("target %q: %w", "t", na)}
	synced := &targetOutcome{target: target}
	failed := &targetOutcome{target: target, err: errors.New("target \"t\": forbidden")}
	if !refusedOnly([]*targetOutcome{refused, synced}) {
		t.Error("refused and synced targets: refusedOnly = false")
	}
	if refusedOnly([]*targetOutcome{refused, failed}) {
		t.Error("a target failed otherwise: refusedOnly = true, the failure would not be retried soon")
	}
	if refusedOnly([]*targetOutcome{synced}) {
		t.Error("nothing refused: refusedOnly = true")
	}
}

// A Role or RoleBinding a gated ManifestSync writes into a namespace that
// allows it may grant writes only: not the verbs that read or escalate
// (get, impersonate, bind, escalate, "*"), and not the "writes" that are
// reads or acting as someone in disguise. What a hostile tenant gets for
// each: the target refused, naming the rule's verb and resource and what
// would allow it; the plain writes still pass.
func TestWriteGateRules(t *testing.T) {
	g := &writeGate{from: "team-a"}
	mine := func(v1alpha1.ObjectID) bool { return true } // no take-over to check
	role := func(groups, resources, verbs []string, urls ...string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
			"metadata": map[string]any{"namespace": "shared", "name": "r"},
			"rules":    []any{map[string]any{"apiGroups": toAny(groups), "resources": toAny(resources), "verbs": toAny(verbs), "nonResourceURLs": toAny(urls)}},
		}}
	}
	core, create := []string{""}, []string{"create"}
	allowedBy := "grant it with a service account (spec.serviceAccountName) or from a trusted namespace (--trusted-namespaces)"
	for _, c := range []struct {
		name string
		obj  *unstructured.Unstructured
		want []string // nil: allowed
	}{
		{"writes", role(core, []string{"configmaps", "pods", "secrets"}, writeVerbs), nil},
		{"status and scale", role([]string{"apps"}, []string{"deployments/status", "deployments/scale", "*/status"}, []string{"update", "patch"}), nil},
		{"a group wildcard on a plain resource", role([]string{"*"}, []string{"configmaps"}, create), nil},
		{"get", role(core, []string{"secrets"}, []string{"get"}), []string{`grants "get" in namespace "shared", where ManifestSyncs of "team-a" may only write`, allowedBy}},
		{"every verb", role(core, []string{"configmaps"}, []string{"*"}), []string{`grants "*"`}},
		{"impersonate", role(core, []string{"serviceaccounts"}, []string{"impersonate"}), []string{`grants "impersonate"`, allowedBy}},
		{"bind", role([]string{"rbac.authorization.k8s.io"}, []string{"roles"}, []string{"bind"}), []string{`grants "bind"`}},
		{"escalate", role([]string{"rbac.authorization.k8s.io"}, []string{"roles"}, []string{"escalate"}), []string{`grants "escalate"`}},
		{"pods/exec", role(core, []string{"pods", "pods/exec"}, create), []string{`grants "create" on "pods/exec" in namespace "shared", which lets its holder run commands in Pods`, allowedBy}},
		{"pods/attach", role(core, []string{"pods/attach"}, create), []string{`"pods/attach"`, "run commands"}},
		{"pods/portforward", role(core, []string{"pods/portforward"}, create), []string{`grants "create" on "pods/portforward"`, "reach what Pods"}},
		{"pods/proxy", role(core, []string{"pods/proxy"}, create), []string{`"pods/proxy"`}},
		{"services/proxy", role(core, []string{"services/proxy"}, []string{"update"}), []string{`grants "update" on "services/proxy"`}},
		{"nodes/proxy", role(core, []string{"nodes/proxy"}, create), []string{`"nodes/proxy"`}},
		{"serviceaccounts/token", role(core, []string{"serviceaccounts/token"}, create), []string{`grants "create" on "serviceaccounts/token"`, "mint a token of any service account", allowedBy}},
		{"pods/ephemeralcontainers", role(core, []string{"pods/ephemeralcontainers"}, []string{"patch"}), []string{`"pods/ephemeralcontainers"`, "run a container in a running Pod"}},
		{"every subresource named exec", role(core, []string{"*/exec"}, create), []string{`"*/exec"`, "run commands"}},
		{"every resource", role(core, []string{"*"}, create), []string{`grants "create" on "*" in namespace "shared", which matches every resource and subresource, pods/exec and serviceaccounts/token among them`}},
		{"every subresource", role(core, []string{"*/*"}, create), []string{`grants "create" on "*/*"`, "every subresource"}},
		{"every subresource of pods", role(core, []string{"pods/*"}, create), []string{`"pods/*"`}},
		{"every group", role([]string{"*"}, []string{"*"}, create), []string{`grants "create" on "*" of API groups "*"`}},
		{"every group's exec", role([]string{"*"}, []string{"pods/exec"}, create), []string{`"pods/exec" of API groups "*"`}},
		{"an unknown subresource", role([]string{"subresources.kubevirt.io"}, []string{"virtualmachineinstances/console"}, []string{"update"}),
			[]string{`"virtualmachineinstances/console" of API groups "subresources.kubevirt.io"`, "cannot tell"}},
		{"non-resource URLs", role(nil, nil, create, "/healthz"), []string{`grants "create" on non-resource URLs (/healthz)`, allowedBy}},
	} {
		t.Run(c.name, func(t *testing.T) {
			why, err := g.objectRefusal(context.Background(), c.obj, nil, mine)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == nil && why != "" {
				t.Errorf("refused: %s; want it written", why)
			}
			if c.want != nil && why == "" {
				t.Errorf("allowed; want it refused with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(why, w) {
					t.Errorf("refusal %q lacks %q", why, w)
				}
			}
		})
	}

	// A RoleBinding is judged by the rules of its role, here one of the
	// same target.
	pods := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "debug"},
		"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods/exec"}, "verbs": []any{"create"}}},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": map[string]any{"namespace": "shared", "name": "debug"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "debug"},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}},
	}}
	why, err := g.objectRefusal(context.Background(), binding, []*unstructured.Unstructured{pods, binding}, mine)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, `grants "create" on "pods/exec"`) {
		t.Errorf("RoleBinding to a ClusterRole of pods/exec: %q, want it refused", why)
	}
}

func toAny(ss []string) []any {
	if ss == nil {
		return nil
	}
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
