package engine_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

func secret(ns, name, uid, rv, value string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"namespace": ns, "name": name, "uid": uid, "resourceVersion": rv},
		"data":     map[string]any{"v": value},
	}
}

// The revision of an object set is over each object's uid and
// resourceVersion, in a fixed order: not over the data (the server's
// resourceVersion stands for it), not over the order objects were listed in.
func TestObjectSetRevision(t *testing.T) {
	a, b := secret("p", "a", "u1", "1", "x"), secret("p", "b", "u2", "5", "y")
	base := engine.ObjectSetSnapshot([]map[string]any{b, a})
	if got := engine.ObjectSetSnapshot([]map[string]any{a, b}); got.Revision != base.Revision {
		t.Errorf("order changes the revision: %s, %s", got.Revision, base.Revision)
	}
	if n := base.Objects[0]["metadata"].(map[string]any)["name"]; n != "a" {
		t.Errorf("first object %v, want a", n)
	}
	if !strings.HasPrefix(base.Revision, "objects:2@sha256:") {
		t.Errorf("revision %q", base.Revision)
	}
	sameVersion := secret("p", "a", "u1", "1", "other data")
	if got := engine.ObjectSetSnapshot([]map[string]any{sameVersion, b}); got.Revision != base.Revision {
		t.Errorf("data at the same resourceVersion changes the revision")
	}
	for name, objs := range map[string][]map[string]any{
		"resourceVersion": {secret("p", "a", "u1", "2", "x"), b},
		"uid (recreated)": {secret("p", "a", "u9", "1", "x"), b},
		"an object less":  {a},
	} {
		if got := engine.ObjectSetSnapshot(objs); got.Revision == base.Revision {
			t.Errorf("%s: the revision did not change", name)
		}
	}
	if got := engine.ObjectSetSnapshot(nil); got.Objects == nil || got.Revision == "" {
		t.Errorf("empty set: %+v", got)
	}
}

// A spec error of an object set names its field, offline as in the CRD.
func TestValidateObjectSet(t *testing.T) {
	for _, tc := range []struct {
		set  v1alpha1.ObjectSetSource
		want string
	}{
		{v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", Exclude: []string{"a(b"}}, `spec.sources[0].objects: exclude[0]: "a(b": error parsing regexp`},
		{v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", Kinds: []v1alpha1.KindReference{{APIVersion: "v1", Kind: "Secret"}}}, "spec.sources[0].objects: kind and kinds are exclusive"},
		{v1alpha1.ObjectSetSource{Kind: "Secret"}, "spec.sources[0].objects: apiVersion and kind are set together"},
		{v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", Namespace: "a", NamespaceSelector: &metav1.LabelSelector{}}, "spec.sources[0].objects: namespace and namespaceSelector are exclusive"},
		{v1alpha1.ObjectSetSource{NamespaceSelector: &metav1.LabelSelector{}}, "spec.sources[0].objects: namespaceSelector: the whole-namespace form"},
		{v1alpha1.ObjectSetSource{Kinds: []v1alpha1.KindReference{{APIVersion: "v1"}}}, "spec.sources[0].objects: kinds[0]: apiVersion and kind are set together"},
		{v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}}}, "spec.sources[0].objects: labelSelector: "},
	} {
		spec := &v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "s", Objects: &tc.set}},
			Targets: []v1alpha1.Target{{Name: "t", Namespace: "t"}},
		}
		errs := engine.Validate(spec)
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Field+": "+errs[0].Msg, tc.want) {
			t.Errorf("%+v: errors %v, want one starting %q", tc.set, errs, tc.want)
		}
	}
}

// The whole-namespace form leaves out what the cluster makes itself, and
// ManifestSyncs.
func TestObjectSetWholeNamespace(t *testing.T) {
	set, err := engine.CompileObjectSet(&v1alpha1.ObjectSetSource{Namespace: "shop"}, "home")
	if err != nil {
		t.Fatal(err)
	}
	obj := func(apiVersion, kind, name string, extra map[string]any) map[string]any {
		m := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"namespace": "shop", "name": name}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	owned := obj("apps/v1", "Deployment", "owned", nil)
	owned["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"apiVersion": "x/v1", "kind": "X", "name": "x", "uid": "1", "controller": true}}
	objs := []map[string]any{
		obj("apps/v1", "Deployment", "web", nil),
		obj("v1", "Secret", "db", map[string]any{"type": "Opaque"}),
		obj("v1", "Secret", "token", map[string]any{"type": "kubernetes.io/service-account-token"}),
		obj("v1", "Pod", "web-1", nil),
		obj("v1", "Event", "e", nil),
		obj("apps/v1", "ReplicaSet", "web-1", nil),
		obj("discovery.k8s.io/v1", "EndpointSlice", "web-x", nil),
		obj("coordination.k8s.io/v1", "Lease", "l", nil),
		obj("manifestsync.dev/v1alpha1", "ManifestSync", "m", nil),
		owned,
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "other", "name": "elsewhere"}},
	}
	var names []string
	for _, o := range set.Filter(objs, nil) {
		names = append(names, o["metadata"].(map[string]any)["name"].(string))
	}
	if got := strings.Join(names, ","); got != "web,db" {
		t.Errorf("selected %s, want web,db", got)
	}
}
