package controller

import "github.com/manifestsync/manifestsync/operator/api/v1alpha1"

// The names this package puts on, and reads from, the objects it manages.
const (
	// FieldManager is the server-side apply field manager of every write.
	FieldManager = "manifestsync"
	// Finalizer holds a ManifestSync until its objects are pruned or
	// orphaned, per spec.policy.deletion.
	Finalizer = "manifestsync.dev/finalizer"
	// OwnerLabel marks an applied object with its ManifestSync,
	// "<namespace>.<name>".
	OwnerLabel = "manifestsync.dev/owner"
	// DigestAnnotation is the digest of the desired object last applied.
	DigestAnnotation = "manifestsync.dev/digest"
	// PolicyAnnotation overrides spec.policy.resources for one object.
	PolicyAnnotation = "manifestsync.dev/policy"
	// PruneAnnotation set to PruneDisabled keeps an object from pruning.
	PruneAnnotation = "manifestsync.dev/prune"
	PruneDisabled   = "disabled"
	// AllowNamespacesAnnotation, on an object source, lists the namespaces
	// (comma-separated, or "*") whose ManifestSyncs may read it.
	AllowNamespacesAnnotation = "manifestsync.dev/allow-namespaces"
)

// ownerValue is the value of OwnerLabel for a ManifestSync.
func ownerValue(ms *v1alpha1.ManifestSync) string {
	return ms.Namespace + "." + ms.Name
}
