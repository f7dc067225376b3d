package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// ObjectSet is an object set source compiled: the rules that pick its
// objects. The operator applies them to what it lists in a cluster, the
// CLI to the objects of a local file, so both read the same set.
type ObjectSet struct {
	// Kinds are the kinds read; nil for the whole-namespace form, whose
	// kinds the reader discovers (see WholeNamespaceKind).
	Kinds []schema.GroupVersionKind
	// Namespace is the one namespace read, or "" with NamespaceSelector.
	Namespace string
	// NamespaceSelector picks the namespaces read; nil with Namespace.
	NamespaceSelector labels.Selector
	// Labels picks the objects; it selects everything when none were given.
	Labels  labels.Selector
	exclude []*regexp.Regexp
}

// CompileObjectSet compiles o, an object set source of a ManifestSync of
// namespace home (the default namespace). Errors name the field of o.
func CompileObjectSet(o *v1alpha1.ObjectSetSource, home string) (*ObjectSet, error) {
	s := &ObjectSet{Namespace: o.Namespace, Labels: labels.Everything()}
	if o.Kind != "" && len(o.Kinds) > 0 {
		return nil, fmt.Errorf("kind and kinds are exclusive")
	}
	if o.Kind != "" || o.APIVersion != "" {
		gvk, err := parseKind(o.APIVersion, o.Kind)
		if err != nil {
			return nil, err
		}
		s.Kinds = []schema.GroupVersionKind{gvk}
	}
	for i, k := range o.Kinds {
		gvk, err := parseKind(k.APIVersion, k.Kind)
		if err != nil {
			return nil, fmt.Errorf("kinds[%d]: %w", i, err)
		}
		s.Kinds = append(s.Kinds, gvk)
	}
	if o.NamespaceSelector != nil {
		if o.Namespace != "" {
			return nil, fmt.Errorf("namespace and namespaceSelector are exclusive")
		}
		if s.Kinds == nil {
			return nil, fmt.Errorf("namespaceSelector: the whole-namespace form (no kind, no kinds) reads one namespace: set namespace")
		}
		sel, err := metav1.LabelSelectorAsSelector(o.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("namespaceSelector: %w", err)
		}
		s.NamespaceSelector = sel
	} else if s.Namespace == "" {
		s.Namespace = home
	}
	if o.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(o.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
		s.Labels = sel
	}
	for i, x := range o.Exclude {
		re, err := regexp.Compile("^(?:" + x + ")$")
		if err != nil {
			return nil, fmt.Errorf("exclude[%d]: %q: %w", i, x, err)
		}
		s.exclude = append(s.exclude, re)
	}
	return s, nil
}

func parseKind(apiVersion, kind string) (schema.GroupVersionKind, error) {
	if apiVersion == "" || kind == "" {
		return schema.GroupVersionKind{}, fmt.Errorf("apiVersion and kind are set together")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("apiVersion %q: %w", apiVersion, err)
	}
	return gv.WithKind(kind), nil
}

// WholeNamespace reports whether s is the whole-namespace form.
func (s *ObjectSet) WholeNamespace() bool { return s.Kinds == nil }

// wholeNamespaceSkips are the kinds the whole-namespace form leaves out:
// those the cluster makes and keeps itself, and ManifestSyncs.
var wholeNamespaceSkips = []schema.GroupKind{
	{Kind: "Event"}, {Group: "events.k8s.io", Kind: "Event"},
	{Kind: "Pod"}, {Kind: "Endpoints"},
	{Group: "apps", Kind: "ReplicaSet"}, {Group: "apps", Kind: "ControllerRevision"},
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"},
	{Group: "coordination.k8s.io", Kind: "Lease"},
	// A ManifestSync is not copied by another one's whole namespace.
	{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.Kind},
}

// WholeNamespaceKind reports whether the whole-namespace form reads the
// kind gk (a namespaced kind that can be listed).
func WholeNamespaceKind(gk schema.GroupKind) bool {
	return !slices.Contains(wholeNamespaceSkips, gk)
}

// SelectsNamespace reports whether s reads the namespace name, whose
// labels are given.
func (s *ObjectSet) SelectsNamespace(name string, lbls map[string]string) bool {
	if s.NamespaceSelector == nil {
		return name == s.Namespace
	}
	return s.NamespaceSelector.Matches(labels.Set(lbls))
}

// Selects reports whether s reads obj, of kind gvk, by what its metadata
// says; its namespace is checked by SelectsNamespace. In the
// whole-namespace form, objects a controller owns are left out: the
// controller makes them again.
func (s *ObjectSet) Selects(gvk schema.GroupVersionKind, obj metav1.Object) bool {
	if s.Kinds != nil && !slices.Contains(s.Kinds, gvk) {
		return false
	}
	if s.Kinds == nil && (!WholeNamespaceKind(gvk.GroupKind()) || metav1.GetControllerOfNoCopy(obj) != nil) {
		return false
	}
	if !s.Labels.Matches(labels.Set(obj.GetLabels())) {
		return false
	}
	return !s.Excludes(obj.GetName())
}

// Excludes reports whether name matches an exclude pattern.
func (s *ObjectSet) Excludes(name string) bool {
	for _, re := range s.exclude {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// SelectsBody reports whether s reads obj by what only its body says: the
// whole-namespace form leaves out service account token Secrets.
func (s *ObjectSet) SelectsBody(obj map[string]any) bool {
	if s.Kinds != nil || obj["apiVersion"] != "v1" || obj["kind"] != "Secret" {
		return true
	}
	return obj["type"] != "kubernetes.io/service-account-token"
}

// Filter returns the objects of objs that s reads. namespaces holds the
// labels of the namespaces known; with a namespaceSelector, objects of a
// namespace not in it are kept (a file stands in for the cluster and need
// not describe every namespace).
func (s *ObjectSet) Filter(objs []map[string]any, namespaces map[string]map[string]string) []map[string]any {
	var out []map[string]any
	for _, m := range objs {
		u := &unstructured.Unstructured{Object: m}
		ns := u.GetNamespace()
		if ns == "" {
			continue // the set reads namespaced objects only
		}
		lbls, known := namespaces[ns]
		switch {
		case s.NamespaceSelector == nil && ns != s.Namespace:
			continue
		case s.NamespaceSelector != nil && known && !s.SelectsNamespace(ns, lbls):
			continue
		}
		if s.Selects(u.GroupVersionKind(), u) && s.SelectsBody(m) {
			out = append(out, m)
		}
	}
	return out
}

// ObjectSetSnapshot makes the snapshot of an object set source: the
// objects in order (namespace, name, group, kind), and a revision over each
// object's uid and resourceVersion (over its content when it has none, as
// objects read from a file), so that the set's revision changes when an
// object joins, leaves or changes, and costs nothing to compute from
// metadata.
func ObjectSetSnapshot(objs []map[string]any) *Snapshot {
	objs = slices.Clone(objs)
	if objs == nil {
		objs = []map[string]any{}
	}
	key := func(m map[string]any) string {
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		return u.GetNamespace() + "\x00" + u.GetName() + "\x00" + gvk.Group + "\x00" + gvk.Kind
	}
	slices.SortStableFunc(objs, func(a, b map[string]any) int { return strings.Compare(key(a), key(b)) })
	h := sha256.New()
	for _, m := range objs {
		u := &unstructured.Unstructured{Object: m}
		id := string(u.GetUID()) + "/" + u.GetResourceVersion()
		if u.GetUID() == "" || u.GetResourceVersion() == "" {
			id = ObjectDigest(m)
		}
		fmt.Fprintf(h, "%s\x00%s\n", key(m), id)
	}
	return &Snapshot{
		Objects:  objs,
		Revision: fmt.Sprintf("objects:%d@sha256:%s", len(objs), hex.EncodeToString(h.Sum(nil))),
	}
}

// setInputs are the inputs of an object set source's snapshot.
func setInputs(name string, snap *Snapshot) []Input {
	in := make([]Input, len(snap.Objects))
	for i, o := range snap.Objects {
		in[i] = Input{Source: name, Object: o}
	}
	return in
}
