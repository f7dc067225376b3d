package controller

import (
	"context"
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// The write gate. A ManifestSync of a namespace that is not trusted
// (Options.TrustedNamespaces) and that runs without a service account
// writes with the operator's own rights; the gate keeps it to what its
// namespace's owner could have written by hand:
//   - objects of its own namespace;
//   - objects of a namespace whose AllowFromAnnotation lists its
//     namespace (or "*"), set by that namespace's owner; there a Role or
//     RoleBinding may grant only writes (writeVerbs), no reads (the
//     ManifestSync may not read there itself), and no write that is a
//     read or acting as someone in disguise (create on pods/exec or
//     serviceaccounts/token, a wildcard resource: subresourceRefusal);
//   - no cluster-scoped object;
//   - no object owned by a ManifestSync of a namespace it may not write.
//
// Every object of a target is checked before any is applied; a target
// with one refused object applies nothing (TargetNotAllowed) and the
// others go on. RBAC in its own namespace is left to the API server's
// escalation check: the operator holds no bind or escalate, so a Role
// granting more than the operator has there is refused. With a service
// account (spec.serviceAccountName or Options.DefaultServiceAccount) the
// API server decides every write by impersonation, and there is no gate.

// AllowFromAnnotation, on a Namespace, lists the namespaces
// (comma-separated, or "*") whose ManifestSyncs may write into it without
// a service account.
const AllowFromAnnotation = "manifestsync.dev/allow-from"

// EventTargetNotAllowed is the Warning event of a target the gate refused.
const EventTargetNotAllowed = v1alpha1.ReasonTargetNotAllowed

// writeVerbs are the verbs a Role or RoleBinding written by a gated
// ManifestSync into another namespace may grant there: what the
// ManifestSync may do there itself.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// trusted reports whether the ManifestSyncs of namespace write anywhere
// the operator can.
func (o Options) trusted(namespace string) bool {
	return slices.Contains(o.TrustedNamespaces, namespace) || slices.Contains(o.TrustedNamespaces, "*")
}

// serviceAccount is the account ms runs as: its own, else, in a namespace
// that is not trusted, Options.DefaultServiceAccount; "" for the
// operator's own identity.
func (o Options) serviceAccount(ms *v1alpha1.ManifestSync) string {
	if ms.Spec.ServiceAccountName != "" || o.trusted(ms.Namespace) {
		return ms.Spec.ServiceAccountName
	}
	return o.DefaultServiceAccount
}

// gated reports whether ms's in-cluster writes go through the gate.
func (o Options) gated(ms *v1alpha1.ManifestSync) bool {
	return o.serviceAccount(ms) == "" && !o.trusted(ms.Namespace)
}

// notAllowedError is a target the gate refused.
type notAllowedError struct{ reasons []string }

func (e *notAllowedError) Error() string {
	return v1alpha1.ReasonTargetNotAllowed + ": " + strings.Join(e.reasons, "; ") + "; nothing of the target was applied"
}

// writeGate decides what one gated ManifestSync may write in this cluster.
type writeGate struct {
	from       string // the ManifestSync's namespace
	owner      string // its OwnerLabel value
	instance   string
	namespaces client.Reader // Namespace metadata, cached
	live       client.Reader
	mapper     apimeta.RESTMapper
}

func (r *Reconciler) writeGate(ms *v1alpha1.ManifestSync) *writeGate {
	return &writeGate{from: ms.Namespace, owner: r.Options.owner(ms), instance: r.Options.InstanceID,
		namespaces: r.Client, live: r.APIReader, mapper: r.Mapper}
}

// allowsFrom reports whether annotation (an AllowFromAnnotation value)
// names namespace.
func allowsFrom(annotation, namespace string) bool {
	for ns := range strings.SplitSeq(annotation, ",") {
		if ns = strings.TrimSpace(ns); ns == "*" || ns == namespace {
			return true
		}
	}
	return false
}

// namespaceRefusal is why the gate may not write into namespace; "" when
// it may.
func (g *writeGate) namespaceRefusal(ctx context.Context, namespace string) (string, error) {
	if namespace == g.from {
		return "", nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := g.namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("namespace %q does not exist, so it allows no writes from %q (annotation %s)", namespace, g.from, AllowFromAnnotation), nil
		}
		return "", fmt.Errorf("reading namespace %q: %w", namespace, err)
	}
	if allowsFrom(ns.Annotations[AllowFromAnnotation], g.from) {
		return "", nil
	}
	return fmt.Sprintf("namespace %q does not allow writes from %q (annotation %s)", namespace, g.from, AllowFromAnnotation), nil
}

// check is the gate over one target: nil when every object may be
// written, a *notAllowedError naming each refused object and what would
// allow it, or the error that kept it from deciding. ids are the target's
// objects; objs their content when it was made (nil for a steady target,
// whose content passed the gate when it was applied); mine reports the
// objects the ManifestSync owns already.
func (g *writeGate) check(ctx context.Context, ids []v1alpha1.ObjectID, objs []*unstructured.Unstructured, mine func(v1alpha1.ObjectID) bool) error {
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
		return &notAllowedError{reasons: reasons}
	}
	return nil
}

// namespaced tells namespaced kinds from cluster-scoped ones; a kind the
// API server does not serve is an error (a CRD of the same target is
// cluster-scoped: refused before).
func (g *writeGate) namespaced(id v1alpha1.ObjectID) (bool, error) {
	m, err := g.mapper.RESTMapping(schema.GroupKind{Group: id.Group, Kind: id.Kind})
	if err != nil {
		return false, fmt.Errorf("%s: %w", id, err)
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, nil
}

// objectRefusal checks what one object, in a namespace the gate allows,
// would do: take over an object of a ManifestSync of a namespace the gate
// does not allow, or, in another namespace, grant reads or RBAC powers.
func (g *writeGate) objectRefusal(ctx context.Context, obj *unstructured.Unstructured, objs []*unstructured.Unstructured, mine func(v1alpha1.ObjectID) bool) (string, error) {
	if id := v1alpha1.IDOf(obj); !mine(id) {
		why, err := g.takeOver(ctx, obj)
		if why != "" || err != nil {
			return why, err
		}
	}
	if obj.GetNamespace() == g.from || obj.GroupVersionKind().Group != rbacv1.GroupName {
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
func (g *writeGate) ruleRefusal(rule rbacv1.PolicyRule, namespace string) string {
	for _, verb := range rule.Verbs {
		if !slices.Contains(writeVerbs, verb) {
			return fmt.Sprintf("grants %q in namespace %q, where ManifestSyncs of %q may only write (%s); %s",
				verb, namespace, g.from, strings.Join(writeVerbs, ", "), grantAllowedBy)
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
				verb, res, ofGroups(rule.APIGroups), namespace, what, g.from, grantAllowedBy)
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
func (g *writeGate) boundRules(ctx context.Context, b *rbacv1.RoleBinding, objs []*unstructured.Unstructured) ([]rbacv1.PolicyRule, string, error) {
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
		err = g.live.Get(ctx, key, role)
		rules = role.Rules
	} else {
		role := &rbacv1.ClusterRole{}
		err = g.live.Get(ctx, key, role)
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
func (g *writeGate) takeOver(ctx context.Context, obj *unstructured.Unstructured) (string, error) {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	if err := g.live.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("reading %s: %w", v1alpha1.IDOf(obj), err)
	}
	value := live.Labels[OwnerLabel]
	key, instance, ok := parseOwner(value)
	if !ok || value == g.owner || instance != g.instance || key.Namespace == g.from {
		return "", nil
	}
	why, err := g.namespaceRefusal(ctx, key.Namespace)
	if why == "" || err != nil {
		return "", err
	}
	return fmt.Sprintf("is owned by ManifestSync %s/%s, and %s", key.Namespace, key.Name, why), nil
}

// checkWrites runs the gate over target t of ms in cluster c, when ms is
// gated and c is this cluster. rec, when complete for t, names its
// objects, and names those ms owns.
func (r *Reconciler) checkWrites(ctx context.Context, ms *v1alpha1.ManifestSync, c *cluster, t *engine.TargetResult, rec *targetRecord) error {
	if c.remote || !r.Options.gated(ms) {
		return nil
	}
	var ids []v1alpha1.ObjectID
	for id := range objectIDs(t, rec) {
		ids = append(ids, id)
	}
	var objs []*unstructured.Unstructured
	if made(t) {
		objs = t.Objects
	}
	mine := func(id v1alpha1.ObjectID) bool { return rec != nil && rec.names(id) }
	return r.writeGate(ms).check(ctx, ids, objs, mine)
}

// refusedOnly reports whether the targets that failed all failed at the
// gate: the sync then waits for a change of the spec or of a Namespace's
// AllowFromAnnotation (watched), not for a retry.
func refusedOnly(outcomes []*targetOutcome) bool {
	refused := false
	for _, o := range outcomes {
		var na *notAllowedError
		switch {
		case errors.As(o.err, &na):
			refused = true
		case !o.ok():
			return false
		}
	}
	return refused
}

// notAllowedEvents records a Warning event per refused target.
func (r *Reconciler) notAllowedEvents(ms *v1alpha1.ManifestSync, outcomes []*targetOutcome) {
	for _, o := range outcomes {
		var na *notAllowedError
		if errors.As(o.err, &na) {
			r.event(ms, true, EventTargetNotAllowed, "Apply", fmt.Sprintf("Target %q: %s", o.target.ID(), na.Error()))
		}
	}
}

// gatedClient is the writing client of a gated ManifestSync: every write
// (apply, drift correction, prune, orphaning on deletion) of an object in
// a namespace the gate does not allow, or of a cluster-scoped object, is
// refused without a request. The check of each target before it is
// applied says why at once and applies nothing; this keeps prune and
// deletion to namespaces the ManifestSync may still write (an
// allow-from taken back).
type gatedClient struct {
	client.Client
	gate *writeGate
}

func (c gatedClient) allow(ctx context.Context, obj client.Object) error {
	id := fmt.Sprintf("%s %s", obj.GetObjectKind().GroupVersionKind().Kind, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()})
	namespaced, err := c.IsObjectNamespaced(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	if !namespaced || obj.GetNamespace() == "" {
		return &notAllowedError{reasons: []string{id + ": cluster-scoped objects are written only by ManifestSyncs of trusted namespaces or with a service account"}}
	}
	why, err := c.gate.namespaceRefusal(ctx, obj.GetNamespace())
	if err != nil {
		return err
	}
	if why != "" {
		return &notAllowedError{reasons: []string{id + ": " + why}}
	}
	return nil
}

func (c gatedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c gatedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c gatedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c gatedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c gatedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.allow(ctx, obj); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

// Apply checks the object of an unstructured apply configuration (the
// applier's); the typed ones, which it does not write, are refused.
func (c gatedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	o, ok := obj.(client.Object)
	if !ok {
		return fmt.Errorf("apply configuration %T: the write gate reads only unstructured ones", obj)
	}
	if err := c.allow(ctx, o); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

// allowFromChanged passes the updates of a Namespace that change its
// AllowFromAnnotation.
func allowFromChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[AllowFromAnnotation] != e.ObjectNew.GetAnnotations()[AllowFromAnnotation]
		},
	}
}

// forAllowFrom maps a Namespace to the ManifestSyncs of the namespaces
// its AllowFromAnnotation names (every one for "*"), which may now write
// into it: a target refused by the gate is retried at once.
func (r *Reconciler) forAllowFrom(ctx context.Context, ns client.Object) []reconcile.Request {
	value := ns.GetAnnotations()[AllowFromAnnotation]
	if value == "" {
		return nil
	}
	var namespaces []string
	for n := range strings.SplitSeq(value, ",") {
		switch n = strings.TrimSpace(n); n {
		case "":
		case "*":
			namespaces = []string{""} // every namespace
		default:
			namespaces = append(namespaces, n)
		}
		if slices.Equal(namespaces, []string{""}) {
			break
		}
	}
	var reqs []reconcile.Request
	for _, n := range namespaces {
		var list v1alpha1.ManifestSyncList
		if err := r.Client.List(ctx, &list, client.InNamespace(n), client.UnsafeDisableDeepCopy); err != nil {
			continue // the next resync reads it
		}
		for _, ms := range list.Items {
			if r.Options.gated(&ms) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ms.Namespace, Name: ms.Name}})
			}
		}
	}
	return reqs
}

// forNamespaceOrAllowFrom maps a Namespace to the ManifestSyncs that
// target it (forNamespace) and to those its AllowFromAnnotation lets
// write into it (forAllowFrom).
func (r *Reconciler) forNamespaceOrAllowFrom(ctx context.Context, ns client.Object) []reconcile.Request {
	return append(r.forNamespace(ctx, ns), r.forAllowFrom(ctx, ns)...)
}
