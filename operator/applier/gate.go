package applier

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// The write gate's checks of what a gated ManifestSync may write: the
// reconciler (operator/controller writegate.go) says which ManifestSyncs
// are gated and what a refusal does to a sync; the rules are here, beside
// the applier whose writes they keep in bounds.

// AllowFromAnnotation, on a Namespace, lists the namespaces
// (comma-separated, or "*") whose ManifestSyncs may write into it without
// a service account.
const AllowFromAnnotation = "manifestsync.dev/allow-from"

// writeVerbs are the verbs a Role or RoleBinding written by a gated
// ManifestSync into another namespace may grant there: what the
// ManifestSync may do there itself.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// NotAllowedError is a target the gate refused.
type NotAllowedError struct{ Reasons []string }

func (e *NotAllowedError) Error() string {
	return v1alpha1.ReasonTargetNotAllowed + ": " + strings.Join(e.Reasons, "; ") + "; nothing of the target was applied"
}

// Gate decides what one gated ManifestSync may write in this cluster.
type Gate struct {
	From       string        // the ManifestSync's namespace
	Owner      string        // its OwnerLabel value
	Instance   string        // the operator's instance id
	Namespaces client.Reader // Namespace metadata (the reconciler's cache)
	Live       client.Reader // reads from the API server
	Mapper     apimeta.RESTMapper
}

// AllowsFrom reports whether annotation (an AllowFromAnnotation value)
// names namespace.
func AllowsFrom(annotation, namespace string) bool {
	for ns := range strings.SplitSeq(annotation, ",") {
		if ns = strings.TrimSpace(ns); ns == "*" || ns == namespace {
			return true
		}
	}
	return false
}

// namespaceRefusal is why the gate may not write into namespace; "" when
// it may.
func (g *Gate) namespaceRefusal(ctx context.Context, namespace string) (string, error) {
	if namespace == g.From {
		return "", nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := g.Namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("namespace %q does not exist, so it allows no writes from %q (annotation %s)", namespace, g.From, AllowFromAnnotation), nil
		}
		return "", fmt.Errorf("reading namespace %q: %w", namespace, err)
	}
	if AllowsFrom(ns.Annotations[AllowFromAnnotation], g.From) {
		return "", nil
	}
	return fmt.Sprintf("namespace %q does not allow writes from %q (annotation %s)", namespace, g.From, AllowFromAnnotation), nil
}

// Check is the gate over one target: nil when every object may be
// written, a *NotAllowedError naming each refused object and what would
// allow it, or the error that kept it from deciding. ids are the target's
// objects; objs their content when it was made (nil for a steady target,
// whose content passed the gate when it was applied); mine reports the
// objects the ManifestSync owns already.
func (g *Gate) Check(ctx context.Context, ids []v1alpha1.ObjectID, objs []*unstructured.Unstructured, mine func(v1alpha1.ObjectID) bool) error {
	var reasons []string
	refusedNS := map[string]string{}
	for _, id := range ids {
		namespaced, err := g.namespaced(id)
		if err != nil {
			return err
		}
		if !namespaced || id.Namespace == "" {
			reasons = append(reasons, fmt.Sprintf("%s: cluster-scoped objects are written only by ManifestSyncs of trusted namespaces (--trusted-namespaces) or with a service account allowed to (spec.serviceAccountName)",
				v1alpha1.ObjectID{Group: id.Group, Kind: id.Kind, Name: id.Name}))
			continue
		}
		why, seen := refusedNS[id.Namespace]
		if !seen {
			if why, err = g.namespaceRefusal(ctx, id.Namespace); err != nil {
				return err
			}
			refusedNS[id.Namespace] = why
		}
		if why != "" {
			reasons = append(reasons, id.String()+": "+why)
		}
	}
	if len(reasons) == 0 {
		for _, obj := range objs {
			why, err := g.objectRefusal(ctx, obj, objs, mine)
			if err != nil {
				return err
			}
			if why != "" {
				reasons = append(reasons, v1alpha1.IDOf(obj).String()+": "+why)
			}
		}
	}
	if len(reasons) > 0 {
		return &NotAllowedError{Reasons: reasons}
	}
	return nil
}

// namespaced tells namespaced kinds from cluster-scoped ones; a kind the
// API server does not serve is an error (a CRD of the same target is
// cluster-scoped: refused before).
func (g *Gate) namespaced(id v1alpha1.ObjectID) (bool, error) {
	m, err := g.Mapper.RESTMapping(schema.GroupKind{Group: id.Group, Kind: id.Kind})
	if err != nil {
		return false, fmt.Errorf("%s: %w", id, err)
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, nil
}

// objectRefusal checks what one object, in a namespace the gate allows,
// would do: take over an object of a ManifestSync of a namespace the gate
// does not allow, or, in another namespace, grant reads or RBAC powers.
func (g *Gate) objectRefusal(ctx context.Context, obj *unstructured.Unstructured, objs []*unstructured.Unstructured, mine func(v1alpha1.ObjectID) bool) (string, error) {
	if id := v1alpha1.IDOf(obj); !mine(id) {
		why, err := g.takeOver(ctx, obj)
		if why != "" || err != nil {
			return why, err
		}
	}
	if obj.GetNamespace() == g.From || obj.GroupVersionKind().Group != rbacv1.GroupName {
		return "", nil
	}
	var rules []rbacv1.PolicyRule
	switch obj.GetKind() {
	case "Role":
		role := &rbacv1.Role{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role); err != nil {
			return "", fmt.Errorf("%s: %w", v1alpha1.IDOf(obj), err)
		}
		rules = role.Rules
	case "RoleBinding":
		binding := &rbacv1.RoleBinding{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, binding); err != nil {
			return "", fmt.Errorf("%s: %w", v1alpha1.IDOf(obj), err)
		}
		var (
			why string
			err error
		)
		if rules, why, err = g.boundRules(ctx, binding, objs); why != "" || err != nil {
			return why, err
		}
	default:
		return "", nil
	}
	for _, rule := range rules {
		if why := g.ruleRefusal(rule, obj.GetNamespace()); why != "" {
			return why, nil
		}
	}
	return "", nil
}

// grantAllowedBy says what would allow a grant the gate refuses.
const grantAllowedBy = "grant it with a service account (spec.serviceAccountName) or from a trusted namespace (--trusted-namespaces)"

// ruleRefusal is why a rule of a Role or RoleBinding in namespace, another
// than the ManifestSync's, may not be written; "" when it may. A rule may
// grant only writes (writeVerbs), and not the writes that are reads or
// acting as someone in disguise (subresourceRefusal); nor non-resource
// URLs.
func (g *Gate) ruleRefusal(rule rbacv1.PolicyRule, namespace string) string {
	for _, verb := range rule.Verbs {
		if !slices.Contains(writeVerbs, verb) {
			return fmt.Sprintf("grants %q in namespace %q, where ManifestSyncs of %q may only write (%s); %s",
				verb, namespace, g.From, strings.Join(writeVerbs, ", "), grantAllowedBy)
		}
	}
	if len(rule.Verbs) == 0 {
		return ""
	}
	verb := rule.Verbs[0]
	if len(rule.NonResourceURLs) > 0 {
		return fmt.Sprintf("grants %q on non-resource URLs (%s), which the gate does not check; %s",
			verb, strings.Join(rule.NonResourceURLs, ", "), grantAllowedBy)
	}
	for _, res := range rule.Resources {
		if what := subresourceRefusal(res); what != "" {
			return fmt.Sprintf("grants %q on %q%s in namespace %q, which %s: more than ManifestSyncs of %q may do there; %s",
				verb, res, ofGroups(rule.APIGroups), namespace, what, g.From, grantAllowedBy)
		}
	}
	return ""
}

// ofGroups words the API groups of a rule after its resource: nothing for
// the core group alone.
func ofGroups(groups []string) string {
	if len(groups) == 0 || slices.Equal(groups, []string{""}) {
		return ""
	}
	quoted := make([]string, len(groups))
	for i, g := range groups {
		quoted[i] = fmt.Sprintf("%q", g)
	}
	return " of API groups " + strings.Join(quoted, ", ")
}

// safeSubresources are the subresources a write of which is a write: of
// what the object says of itself, its size, its finalizers, an eviction
// or a resize of its Pods.
var safeSubresources = []string{"status", "scale", "finalizers", "eviction", "resize"}

// subresourceRefusal says what a write grant on resource res (as a rule
// names it) would let its holder do beyond writing; "" for a plain write.
// A create on pods/exec runs commands in another team's Pods (reading
// what they hold, acting as their service accounts); on
// serviceaccounts/token it mints a token of any account of the namespace.
// RBAC's wildcards include them: a resource "*" matches every resource
// and subresource of the rule's groups (an apiGroup "*" is every group,
// so "*" there holds pods/exec); a "*/name" matches that subresource of
// every resource. A subresource the gate does not know (an aggregated
// API's console, say) is refused too: it cannot tell what it does.
func subresourceRefusal(res string) string {
	_, sub, isSub := strings.Cut(res, "/")
	switch {
	case res == "*":
		return "matches every resource and subresource, pods/exec and serviceaccounts/token among them"
	case sub == "*":
		return "matches every subresource, exec and token among them"
	case !isSub:
		return ""
	case sub == "exec" || sub == "attach":
		return "lets its holder run commands in Pods, reading what they hold and acting as their service accounts"
	case sub == "portforward" || sub == "proxy":
		return "lets its holder reach what Pods, Services or Nodes serve, reading it"
	case sub == "token":
		return "lets its holder mint a token of any service account, acting as it"
	case sub == "ephemeralcontainers":
		return "lets its holder run a container in a running Pod, with its service account and volumes"
	case slices.Contains(safeSubresources, sub):
		return ""
	}
	return "is a subresource whose writes the gate cannot tell from reads or acting as someone"
}

// boundRules are the rules a RoleBinding grants: those of its role, from
// the target's objects or else the cluster.
func (g *Gate) boundRules(ctx context.Context, b *rbacv1.RoleBinding, objs []*unstructured.Unstructured) ([]rbacv1.PolicyRule, string, error) {
	ref := b.RoleRef
	if ref.Kind != "Role" && ref.Kind != "ClusterRole" {
		return nil, fmt.Sprintf("binds a role of kind %q, which the gate cannot check", ref.Kind), nil
	}
	key := client.ObjectKey{Name: ref.Name}
	if ref.Kind == "Role" {
		key.Namespace = b.Namespace
	}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() == (schema.GroupKind{Group: rbacv1.GroupName, Kind: ref.Kind}) && o.GetName() == key.Name && o.GetNamespace() == key.Namespace {
			var role rbacv1.ClusterRole // a Role's rules read the same
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				return nil, "", fmt.Errorf("%s: %w", v1alpha1.IDOf(o), err)
			}
			return role.Rules, "", nil
		}
	}
	var (
		rules []rbacv1.PolicyRule
		err   error
	)
	if ref.Kind == "Role" {
		role := &rbacv1.Role{}
		err = g.Live.Get(ctx, key, role)
		rules = role.Rules
	} else {
		role := &rbacv1.ClusterRole{}
		err = g.Live.Get(ctx, key, role)
		rules = role.Rules
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("binds %s %q, which does not exist: what it would grant cannot be checked", ref.Kind, ref.Name), nil
	case apierrors.IsForbidden(err):
		return nil, fmt.Sprintf("binds %s %q, which the operator may not read: what it would grant cannot be checked", ref.Kind, ref.Name), nil
	case err != nil:
		return nil, "", fmt.Errorf("reading %s %q of RoleBinding %s/%s: %w", ref.Kind, ref.Name, b.Namespace, b.Name, err)
	}
	return rules, "", nil
}

// takeOver refuses to write over an object of a ManifestSync (of this
// operator instance) whose namespace the gate may not write into: an
// object a platform team put into a tenant's namespace stays the platform
// team's, whatever the tenant's policy (Adopt, Overwrite).
func (g *Gate) takeOver(ctx context.Context, obj *unstructured.Unstructured) (string, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	if err := g.Live.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading %s: %w", v1alpha1.IDOf(obj), err)
	}
	value := live.Labels[OwnerLabel]
	key, instance, ok := ParseOwner(value)
	if !ok || value == g.Owner || instance != g.Instance || key.Namespace == g.From {
		return "", nil
	}
	why, err := g.namespaceRefusal(ctx, key.Namespace)
	if why == "" || err != nil {
		return "", err
	}
	return fmt.Sprintf("is owned by ManifestSync %s/%s, and %s", key.Namespace, key.Name, why), nil
}

// GatedClient is the writing client of a gated ManifestSync: every write
// (apply, drift correction, prune, orphaning on deletion) of an object in
// a namespace the gate does not allow, or of a cluster-scoped object, is
// refused without a request. The check of each target before it is
// applied says why at once and applies nothing; this keeps prune and
// deletion to namespaces the ManifestSync may still write (an
// allow-from taken back).
type GatedClient struct {
	client.Client
	Gate *Gate
}

func (c GatedClient) allow(ctx context.Context, obj client.Object) error {
	id := fmt.Sprintf("%s %s", obj.GetObjectKind().GroupVersionKind().Kind, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()})
	namespaced, err := c.IsObjectNamespaced(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if !namespaced || obj.GetNamespace() == "" {
		return &NotAllowedError{Reasons: []string{id + ": cluster-scoped objects are written only by ManifestSyncs of trusted namespaces or with a service account"}}
	}
	why, err := c.Gate.namespaceRefusal(ctx, obj.GetNamespace())
	if err != nil {
		return err
	}
	if why != "" {
		return &NotAllowedError{Reasons: []string{id + ": " + why}}
	}
	return nil
}

func (c GatedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c GatedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c GatedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c GatedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c GatedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

// Apply checks the object of an unstructured apply configuration (the
// applier's); the typed ones, which it does not write, are refused.
func (c GatedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	o, ok := obj.(client.Object)
	if !ok {
		return fmt.Errorf("apply configuration %T: the write gate reads only unstructured ones", obj)
	}
	if err := c.allow(ctx, o); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}
