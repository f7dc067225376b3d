package controller

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// spec.dependsOn: nothing of a ManifestSync is read, evaluated, applied or
// pruned until every ManifestSync it depends on is Ready at its current
// generation. Until then it is Ready=False, reason DependencyNotReady,
// naming each dependency that is not Ready and why, and what it applied
// before stays as it is. A ManifestSync on a cycle of dependencies is
// Ready=False, reason DependencyCycle, naming the cycle, on every
// ManifestSync of the cycle.
//
// A dependency turning Ready wakes its dependants at once: the cache
// indexes every ManifestSync by the dependencies it names
// (indexDependsOn), and a change of a ManifestSync's Ready condition or
// generation enqueues the ManifestSyncs that name it (forDependants). A
// dependant waits for that event, not for its interval.
//
// Tenancy. Only the Ready condition of a dependency (its status, reason
// and observedGeneration), its generation, whether it is being deleted
// and, to find cycles, its spec.dependsOn are read; never its message,
// which may name another tenant's objects or quote their errors. With
// Options.RequireServiceAccount (the operator's tenancy lockdown) a
// dependency in another namespace is refused, as Flux's
// --no-cross-namespace-refs does: a tenant must not learn, through its own
// status, whether another namespace's ManifestSync syncs, nor hold its own
// sync on another tenant's. Cycles are then searched within the namespace
// only, the cross-namespace edges being refused anyway.

// indexDependsOn holds each dependency of a ManifestSync as
// "namespace/name".
const indexDependsOn = "manifestsync.dev/depends-on"

// EventDependencyNotReady and EventDependencyCycle are the events of a
// ManifestSync that waits, recorded once per change of what it waits for.
const (
	EventDependencyNotReady = "DependencyNotReady"
	EventDependencyCycle    = "DependencyCycle"
)

// dependsOnKeys are the index keys of ms's dependencies.
func dependsOnKeys(ms *v1alpha1.ManifestSync) []string {
	refs := engine.DependsOn(ms.Namespace, ms.Spec.DependsOn)
	keys := make([]string, len(refs))
	for i, d := range refs {
		keys[i] = d.String()
	}
	return keys
}

// forDependants maps a ManifestSync to those that depend on it.
func (r *Reconciler) forDependants(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.listBy(ctx, indexDependsOn, engine.SyncRef{Namespace: obj.GetNamespace(), Name: obj.GetName()}.String())
}

// readinessChanged passes the ManifestSync events that can change whether
// its dependants may sync: it appears or goes, its spec changes (its
// dependencies may close a cycle) or its deletion starts, or its Ready
// condition changes.
func readinessChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*v1alpha1.ManifestSync)
			cur, ok2 := e.ObjectNew.(*v1alpha1.ManifestSync)
			if !ok1 || !ok2 {
				return true
			}
			if old.Generation != cur.Generation || !old.DeletionTimestamp.Equal(cur.DeletionTimestamp) {
				return true
			}
			a := apimeta.FindStatusCondition(old.Status.Conditions, v1alpha1.ConditionReady)
			b := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
			if a == nil || b == nil {
				return (a == nil) != (b == nil)
			}
			return a.Status != b.Status || a.Reason != b.Reason || a.ObservedGeneration != b.ObservedGeneration
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// dependencyBlock is why ms may not sync yet: reason is
// DependencyNotReady or DependencyCycle.
type dependencyBlock struct {
	reason, msg string
}

// checkDependencies returns what keeps ms from syncing, or nil when every
// dependency is Ready at its current generation. Dependencies are read
// from the operator's cache: the event that changes one is what wakes ms.
func (r *Reconciler) checkDependencies(ctx context.Context, ms *v1alpha1.ManifestSync) (*dependencyBlock, error) {
	if len(ms.Spec.DependsOn) == 0 {
		return nil, nil
	}
	self := engine.SyncRef{Namespace: ms.Namespace, Name: ms.Name}
	var readErr error
	cycle := engine.DependencyCycle(self, func(ref engine.SyncRef) []engine.SyncRef {
		dep := ms
		if ref != self {
			var err error
			if dep, err = r.getSync(ctx, ref); err != nil || dep == nil {
				if readErr == nil {
					readErr = err
				}
				return nil
			}
		}
		var out []engine.SyncRef
		for _, d := range engine.DependsOn(dep.Namespace, dep.Spec.DependsOn) {
			if r.crossNamespaceAllowed(ref, d) {
				out = append(out, d)
			}
		}
		return out
	})
	if readErr != nil {
		return nil, readErr
	}
	if cycle != nil {
		return &dependencyBlock{reason: v1alpha1.ReasonDependencyCycle, msg: "dependsOn cycle: " + engine.CycleString(cycle)}, nil
	}

	var waiting []string
	seen := map[engine.SyncRef]bool{}
	for _, d := range engine.DependsOn(ms.Namespace, ms.Spec.DependsOn) {
		if seen[d] {
			continue
		}
		seen[d] = true
		if !r.crossNamespaceAllowed(self, d) {
			waiting = append(waiting, fmt.Sprintf("ManifestSync %s is in another namespace: the operator requires spec.serviceAccountName (tenancy lockdown), which allows dependencies in the ManifestSync's own namespace only", d))
			continue
		}
		dep, err := r.getSync(ctx, d)
		if err != nil {
			return nil, err
		}
		if why := notReady(dep); why != "" {
			waiting = append(waiting, fmt.Sprintf("ManifestSync %s %s", d, why))
		}
	}
	if len(waiting) == 0 {
		return nil, nil
	}
	return &dependencyBlock{reason: v1alpha1.ReasonDependencyNotReady, msg: strings.Join(waiting, "; ")}, nil
}

// crossNamespaceAllowed says whether from may depend on to: always in its
// own namespace, in another only without the tenancy lockdown.
func (r *Reconciler) crossNamespaceAllowed(from, to engine.SyncRef) bool {
	return from.Namespace == to.Namespace || !r.Options.RequireServiceAccount
}

// getSync reads a ManifestSync from the cache; nil when there is none.
// Under sharding one the replica's cache does not hold is read from its
// dependency view (depends_shard.go).
func (r *Reconciler) getSync(ctx context.Context, ref engine.SyncRef) (*v1alpha1.ManifestSync, error) {
	ms := &v1alpha1.ManifestSync{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ms)
	switch {
	case apierrors.IsNotFound(err) && r.deps != nil:
		return r.deps.get(ctx, ref)
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ManifestSync %s: %w", ref, err)
	}
	return ms, nil
}

// notReady says why dep (nil: it does not exist) is not Ready at its
// current generation, or "" when it is. It reads the reason of dep's
// Ready condition, never its message.
func notReady(dep *v1alpha1.ManifestSync) string {
	if dep == nil {
		return "not found"
	}
	if !dep.DeletionTimestamp.IsZero() {
		return "is being deleted"
	}
	c := apimeta.FindStatusCondition(dep.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return "is not Ready: not reconciled yet"
	case c.ObservedGeneration != dep.Generation:
		return fmt.Sprintf("is not Ready: generation %d not reconciled yet", dep.Generation)
	case c.Status != metav1.ConditionTrue:
		return "is not Ready: " + c.Reason
	}
	return ""
}

// waitForDependencies reports that ms waits for its dependencies: its
// Ready condition says which and why, its target rows stay as they were
// (rows it never had are Pending), and an event is recorded when what it
// waits for changed. Nothing is retried: the change of a dependency wakes
// ms (forDependants), and its interval is the fallback.
func (r *Reconciler) waitForDependencies(ctx context.Context, st *syncState, orig, ms *v1alpha1.ManifestSync, b *dependencyBlock) (ctrl.Result, error) {
	prev := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady)
	changed := prev == nil || prev.Reason != b.reason || prev.Message != truncate(b.msg)
	setConditions(ms, b.reason, b.msg)
	if len(ms.Status.Targets) == 0 {
		for _, t := range ms.Spec.Targets {
			ms.Status.Targets = append(ms.Status.Targets, v1alpha1.TargetStatus{
				Name: t.Name, Namespace: t.Namespace, State: v1alpha1.TargetPending, Message: brief("not applied: " + b.msg),
			})
		}
		ms.Status.TargetsSummary = fmt.Sprintf("0/%d", len(ms.Status.Targets))
	}
	if changed {
		event := EventDependencyNotReady
		if b.reason == v1alpha1.ReasonDependencyCycle {
			event = EventDependencyCycle
		}
		r.event(ms, b.reason == v1alpha1.ReasonDependencyCycle, event, "Apply", b.msg)
		ctrl.LoggerFrom(ctx).Info("waiting for dependencies", "reason", b.reason, "message", b.msg)
	}
	if err := r.patchStatus(ctx, st, orig, ms); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: syncInterval(ms)}, nil
}
