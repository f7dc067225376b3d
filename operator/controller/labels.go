package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// The names this package puts on, and reads from, the objects it manages;
// those the applier writes are the applier package's.
const (
	// FieldManager is the server-side apply field manager of every write
	// of an operator without an instance id; one with an id uses
	// "manifestsync-<id>".
	FieldManager = ssa.FieldManager
	// Finalizer holds a ManifestSync until its objects are pruned or
	// orphaned, per spec.policy.deletion.
	Finalizer = "manifestsync.dev/finalizer"
	// OwnerLabel marks an applied object with its ManifestSync (ssa.OwnerOf).
	OwnerLabel = ssa.OwnerLabel
	// DigestAnnotation is the digest of the desired object last applied
	// (ssa.AsApplied).
	DigestAnnotation = ssa.DigestAnnotation
	// PolicyAnnotation overrides spec.policy.resources for one object.
	PolicyAnnotation = ssa.PolicyAnnotation
	// ShardLabel marks an object with the ID of the replica that applied
	// it, under --shards auto (Options.ShardID).
	ShardLabel = ssa.ShardLabel
	// PruneAnnotation set to PruneDisabled keeps an object from pruning.
	PruneAnnotation = ssa.PruneAnnotation
	PruneDisabled   = ssa.PruneDisabled
	// AllowNamespacesAnnotation, on an object source, lists the namespaces
	// (comma-separated, or "*") whose ManifestSyncs may read it.
	AllowNamespacesAnnotation = "manifestsync.dev/allow-namespaces"
)

// Instance identity (ssa's names.go says how ids keep operators apart).

// ValidateInstanceID reports whether id can be an instance id; "" (none)
// can.
func ValidateInstanceID(id string) error { return ssa.ValidateInstanceID(id) }

// ownerValue is the value of OwnerLabel for a ManifestSync, as an operator
// without an instance id writes it.
func ownerValue(ms *v1alpha1.ManifestSync) string { return ssa.OwnerOf(ms, "") }

// owner is the value of OwnerLabel that this operator writes for ms.
func (o Options) owner(ms *v1alpha1.ManifestSync) string { return ssa.OwnerOf(ms, o.InstanceID) }

// fieldManager is this operator's server-side apply field manager.
func (o Options) fieldManager() string { return ssa.FieldManagerOf(o.InstanceID) }

// parseOwner splits a value of OwnerLabel into the ManifestSync and the
// instance id.
func parseOwner(value string) (types.NamespacedName, string, bool) { return ssa.ParseOwner(value) }

// ownerRequests maps a managed object to the ManifestSync of its
// OwnerLabel, when that is one of this operator's.
func (o Options) ownerRequests(_ context.Context, obj client.Object) []reconcile.Request {
	key, instance, ok := parseOwner(obj.GetLabels()[OwnerLabel])
	if !ok || instance != o.InstanceID {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

// ownedBy describes the owner of an object that is not ours, for a
// Conflict's message.
func ownedBy(value string) string { return ssa.OwnedBy(value) }
