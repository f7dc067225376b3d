package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	apipath "k8s.io/apimachinery/pkg/api/validation/path"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/stdlib"
)

// Scope tells whether a kind is namespaced. ok is false when the kind is
// unknown; unknown kinds are treated as namespaced. The operator passes one
// backed by the cluster's discovery; offline the engine knows the built-in
// cluster-scoped kinds.
type Scope func(gvk schema.GroupVersionKind) (namespaced, ok bool)

// rememberScope is scope asked once per kind: an evaluation asks for
// every object of every target, and the operator's answer comes from
// discovery (a REST mapping, with its allocations, per call).
func rememberScope(scope Scope) Scope {
	type answer struct{ namespaced, ok bool }
	var (
		mu    sync.Mutex
		known = map[schema.GroupVersionKind]answer{}
	)
	return func(gvk schema.GroupVersionKind) (bool, bool) {
		mu.Lock()
		a, seen := known[gvk]
		mu.Unlock()
		if !seen {
			a.namespaced, a.ok = scope(gvk)
			mu.Lock()
			known[gvk] = a
			mu.Unlock()
		}
		return a.namespaced, a.ok
	}
}

// withCRDs is scope, knowing also the kinds the CustomResourceDefinitions
// among objs define: on a cluster that does not serve them yet (they are
// applied first, in the same sync), their custom resources are given a
// namespace or not as their CRD's spec.scope says.
func withCRDs(scope Scope, objs []*unstructured.Unstructured) Scope {
	defined := map[schema.GroupKind]bool{} // namespaced, by kind
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		s, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		if kind != "" {
			defined[schema.GroupKind{Group: group, Kind: kind}] = s != "Cluster"
		}
	}
	if len(defined) == 0 {
		return scope
	}
	return func(gvk schema.GroupVersionKind) (bool, bool) {
		if namespaced, ok := scope(gvk); ok {
			return namespaced, ok
		}
		if namespaced, ok := defined[gvk.GroupKind()]; ok {
			return namespaced, true
		}
		return true, false
	}
}

// clusterScoped lists the cluster-scoped kinds of Kubernetes, by group/kind.
var clusterScoped = map[schema.GroupKind]bool{
	{Group: "", Kind: "Namespace"}:                                                    true,
	{Group: "", Kind: "Node"}:                                                         true,
	{Group: "", Kind: "PersistentVolume"}:                                             true,
	{Group: "", Kind: "ComponentStatus"}:                                              true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
}

// BuiltinScope knows the cluster-scoped kinds of Kubernetes itself.
func BuiltinScope(gvk schema.GroupVersionKind) (namespaced, ok bool) {
	if clusterScoped[gvk.GroupKind()] {
		return false, true
	}
	return true, false
}

// applyOrder ranks kinds so that what others depend on is applied first:
// CRDs, Namespaces, then policies and RBAC, then configuration, then the
// rest, with webhooks last so they cannot block the objects before them.
var applyOrder = map[string]int{
	"CustomResourceDefinition":       0,
	"Namespace":                      1,
	"ResourceQuota":                  2,
	"LimitRange":                     2,
	"PriorityClass":                  2,
	"StorageClass":                   2,
	"ServiceAccount":                 3,
	"ClusterRole":                    4,
	"Role":                           4,
	"ClusterRoleBinding":             5,
	"RoleBinding":                    5,
	"ConfigMap":                      6,
	"Secret":                         6,
	"PersistentVolume":               7,
	"PersistentVolumeClaim":          7,
	"Service":                        8,
	"MutatingWebhookConfiguration":   100,
	"ValidatingWebhookConfiguration": 100,
}

const defaultRank = 50

// normalize sets the target namespace on namespaced objects, strips what
// the server owns, and checks every object names itself.
func normalize(o *unstructured.Unstructured, namespace string, scope Scope) error {
	if o.GetAPIVersion() == "" || o.GetKind() == "" {
		return fmt.Errorf("%s: apiVersion and kind must be set", describe(o))
	}
	if _, err := schema.ParseGroupVersion(o.GetAPIVersion()); err != nil {
		return fmt.Errorf("%s: apiVersion: %w", describe(o), err)
	}
	if o.GetName() == "" && !generatedHook(o) {
		// A hook may be named by its generateName alone: each sync
		// names it (NameHook).
		return fmt.Errorf("%s: metadata.name must be set", describe(o))
	}
	namespaced, _ := scope(o.GroupVersionKind())
	switch {
	case !namespaced:
		unstructured.RemoveNestedField(o.Object, "metadata", "namespace")
	case namespace != "":
		o.SetNamespace(namespace)
	}
	for _, f := range stdlib.ServerOwnedMetadata {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}
	if ann := o.GetAnnotations(); ann != nil {
		if _, ok := ann[stdlib.LastAppliedAnnotation]; ok {
			delete(ann, stdlib.LastAppliedAnnotation)
			if len(ann) == 0 {
				unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
			} else {
				o.SetAnnotations(ann)
			}
		}
	}
	delete(o.Object, "status")
	if o.GetKind() == "Service" && o.GroupVersionKind().Group == "" {
		stdlib.StripAllocatedIPs(o.Object)
	}
	return checkNames(o)
}

// nameRules are the kinds whose names the API server checks by another
// rule than a DNS-1123 subdomain (the rule of every other kind, custom
// resources included). Kinds with a rule of their own that is not simple
// (an IP address, a signer's prefix) get the generic path-segment rule
// every name must pass.
var nameRules = map[schema.GroupKind]func(name string, prefix bool) []string{
	{Group: "", Kind: "Namespace"}:                                    apivalidation.ValidateNamespaceName,
	{Group: "", Kind: "Service"}:                                      apivalidation.NameIsDNS1035Label,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:                apipath.ValidatePathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:         apipath.ValidatePathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:         apipath.ValidatePathSegmentName,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:  apipath.ValidatePathSegmentName,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: apipath.ValidatePathSegmentName,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        apipath.ValidatePathSegmentName,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                   apipath.ValidatePathSegmentName,
}

// checkNames refuses a name or namespace the API server would refuse, so
// that eval and vet catch it offline.
func checkNames(o *unstructured.Unstructured) error {
	rule, ok := nameRules[o.GroupVersionKind().GroupKind()]
	if !ok {
		rule = apivalidation.NameIsDNSSubdomain
	}
	if generatedHook(o) {
		if msgs := rule(o.GetGenerateName(), true); len(msgs) > 0 {
			return fmt.Errorf("%s: metadata.generateName: %s", describe(o), invalidName(o.GetGenerateName(), msgs))
		}
	} else if msgs := rule(o.GetName(), false); len(msgs) > 0 {
		return fmt.Errorf("%s: metadata.name: %s", describe(o), invalidName(o.GetName(), msgs))
	}
	if ns := o.GetNamespace(); ns != "" {
		if msgs := apivalidation.ValidateNamespaceName(ns, false); len(msgs) > 0 {
			return fmt.Errorf("%s: metadata.namespace: %s", describe(o), invalidName(ns, msgs))
		}
	}
	return nil
}

// invalidName words a refused name, quoted (so a NUL or a newline shows)
// and cut short when it is long.
func invalidName(name string, msgs []string) string {
	q := strconv.Quote(name)
	if p := printable(name); len(p) < len(name) {
		q = fmt.Sprintf("%s (%d characters)", p, len(name))
	}
	return q + " is not valid: " + strings.Join(msgs, "; ")
}

// sortObjects orders objects for applying: by kind rank, then group, kind,
// namespace and name, so that the order never depends on the transform's.
// Each object's key is read once, not at every comparison.
func sortObjects(objs []*unstructured.Unstructured) {
	type keyed struct {
		rank                  int
		group, kind, ns, name string
		obj                   *unstructured.Unstructured
	}
	ks := make([]keyed, len(objs))
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		ks[i] = keyed{rank(gvk.Kind), gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName(), o}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.rank != b.rank:
			return cmp.Compare(a.rank, b.rank)
		case a.group != b.group:
			return strings.Compare(a.group, b.group)
		case a.kind != b.kind:
			return strings.Compare(a.kind, b.kind)
		case a.ns != b.ns:
			return strings.Compare(a.ns, b.ns)
		}
		return strings.Compare(a.name, b.name)
	})
	for i, k := range ks {
		objs[i] = k.obj
	}
}

func rank(kind string) int {
	if r, ok := applyOrder[kind]; ok {
		return r
	}
	return defaultRank
}

// describe names an object for messages as v1alpha1.ObjectID does,
// "Deployment web-dev/web", also before it is checked: a missing kind shows
// as "object", a missing name as "(no name)", odd names quoted.
func describe(o *unstructured.Unstructured) string {
	id := v1alpha1.IDOf(o)
	id.Kind = cmp.Or(o.GetKind(), "object")
	id.Namespace = printable(id.Namespace)
	id.Name = cmp.Or(printable(id.Name), "(no name)")
	if g := o.GetGenerateName(); o.GetName() == "" && g != "" {
		id.Name = printable(g) + "*" // a hook, named by each sync
	}
	return id.String()
}

// printable shows a name in a message: as it is when it is short and
// printable, else quoted (a NUL shows as \x00) and cut short.
func printable(s string) string {
	const show = 64
	if len(s) > show {
		return fmt.Sprintf("%q...", s[:show])
	}
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}
