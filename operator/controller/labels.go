package controller

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// The names this package puts on, and reads from, the objects it manages.
const (
	// FieldManager is the server-side apply field manager of every write
	// of an operator without an instance id; one with an id uses
	// "manifestsync-<id>".
	FieldManager = "manifestsync"
	// Finalizer holds a ManifestSync until its objects are pruned or
	// orphaned, per spec.policy.deletion.
	Finalizer = "manifestsync.dev/finalizer"
	// OwnerLabel marks an applied object with its ManifestSync,
	// "<namespace>.<name>", or "<namespace>.<name>_<instance id>" when the
	// operator has an instance id.
	OwnerLabel = "manifestsync.dev/owner"
	// DigestAnnotation is the digest of the desired object last applied:
	// the engine's, or, for a Secret whose stringData was merged into data
	// before applying, that of the object sent (asApplied).
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

// Instance identity. Operators of several clusters may write to one shared
// target cluster, each with ManifestSyncs of the same namespace and name.
// Given distinct instance ids they never fight: the id is part of the
// owner label's value and of the field manager, so each one sees the
// other's objects as not its own (a Conflict under policy Sync), prunes,
// orphans and watches only its own, and keeps its own fields. Adopt and
// Overwrite take objects over from the other, as they do from anyone.
//
// The id joins the owner label's value after "_", a character that no
// namespace or ManifestSync name holds (label values allow no "@"). The
// whole value must stay within 63 characters.

// instanceIDPattern is what an instance id may be: a DNS label, short
// enough to leave room in the owner label for the namespace and name.
var instanceIDPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$`)

// ValidateInstanceID reports whether id can be an instance id; "" (none)
// can.
func ValidateInstanceID(id string) error {
	if id == "" || instanceIDPattern.MatchString(id) {
		return nil
	}
	return fmt.Errorf("instance id %q: want at most 20 lowercase letters, digits and '-', starting and ending with a letter or digit", id)
}

// ownerValue is the value of OwnerLabel for a ManifestSync, as an operator
// without an instance id writes it.
func ownerValue(ms *v1alpha1.ManifestSync) string {
	return ms.Namespace + "." + ms.Name
}

// owner is the value of OwnerLabel that this operator writes for ms.
func (o Options) owner(ms *v1alpha1.ManifestSync) string {
	if o.InstanceID == "" {
		return ownerValue(ms)
	}
	return ownerValue(ms) + "_" + o.InstanceID
}

// fieldManager is this operator's server-side apply field manager.
func (o Options) fieldManager() string {
	if o.InstanceID == "" {
		return FieldManager
	}
	return FieldManager + "-" + o.InstanceID
}

// parseOwner splits a value of OwnerLabel into the ManifestSync and the
// instance id.
func parseOwner(value string) (key types.NamespacedName, instance string, ok bool) {
	value, instance, _ = strings.Cut(value, "_")
	ns, name, ok := strings.Cut(value, ".")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, instance, true
}

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
func ownedBy(value string) string {
	key, instance, ok := parseOwner(value)
	switch {
	case value == "":
		return ""
	case !ok:
		return fmt.Sprintf(" (its %s label is %q)", OwnerLabel, value)
	case instance != "":
		return " (it belongs to ManifestSync " + key.String() + " of operator instance " + instance + ")"
	}
	return " (it belongs to ManifestSync " + key.String() + ")"
}
