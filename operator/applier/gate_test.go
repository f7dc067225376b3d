package applier

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

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
		if got := AllowsFrom(c.value, c.from); got != c.want {
			t.Errorf("AllowsFrom(%q, %q) = %v, want %v", c.value, c.from, got, c.want)
		}
	}
}

// A Role or RoleBinding a gated ManifestSync writes into a namespace that
// allows it may grant writes only: not the verbs that read or escalate
// (get, impersonate, bind, escalate, "*"), and not the "writes" that are
// reads or acting as someone in disguise. What a hostile tenant gets for
// each: the target refused, naming the rule's verb and resource and what
// would allow it; the plain writes still pass.
func TestWriteGateRules(t *testing.T) {
	g := &Gate{From: "team-a"}
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
