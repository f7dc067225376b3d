package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// The write gate. A ManifestSync of a namespace that is not trusted
// (Options.TrustedNamespaces) and that runs without a service account
// writes with the operator's own rights; the gate keeps it to what its
// namespace's owner could have written by hand:
//   - objects of its own namespace;
//   - objects of a namespace whose AllowFromAnnotation lists its
//     namespace (or "*"), set by that namespace's owner; there a Role or
//     RoleBinding may grant only writes (the applier's gate.go), no reads (the
//     ManifestSync may not read there itself), and no write that is a
//     read or acting as someone in disguise (create on pods/exec or
//     serviceaccounts/token, a wildcard resource: ssa.Gate's rules);
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
// a service account (ssa.Gate).
const AllowFromAnnotation = ssa.AllowFromAnnotation

// EventTargetNotAllowed is the Warning event of a target the gate refused.
const EventTargetNotAllowed = v1alpha1.ReasonTargetNotAllowed

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
type notAllowedError = ssa.NotAllowedError

// writeGate is the gate of ms in this cluster.
func (r *Reconciler) writeGate(ms *v1alpha1.ManifestSync) *ssa.Gate {
	return &ssa.Gate{From: ms.Namespace, Owner: r.Options.owner(ms), Instance: r.Options.InstanceID,
		Namespaces: r.Client, Live: r.APIReader, Mapper: r.Mapper}
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
	return r.writeGate(ms).Check(ctx, ids, objs, mine)
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
