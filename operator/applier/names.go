package applier

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
)

// The names the applier puts on, and reads from, the objects it manages.
const (
	// FieldManager is the server-side apply field manager of every write
	// of an operator without an instance id; one with an id uses
	// "manifestsync-<id>" (FieldManagerOf).
	FieldManager = "manifestsync"
	// OwnerLabel marks an applied object with its ManifestSync,
	// "<namespace>.<name>", or "<namespace>.<name>_<instance id>" when the
	// operator has an instance id (OwnerOf).
	OwnerLabel = "manifestsync.dev/owner"
	// DigestAnnotation is the digest of the desired object last applied:
	// the engine's, or, for a Secret whose stringData was merged into data
	// before applying, that of the object sent (AsApplied).
	DigestAnnotation = "manifestsync.dev/digest"
	// PolicyAnnotation overrides spec.policy.resources for one object.
	PolicyAnnotation = "manifestsync.dev/policy"
	// PruneAnnotation set to PruneDisabled keeps an object from pruning.
	PruneAnnotation = "manifestsync.dev/prune"
	PruneDisabled   = "disabled"
	// HookLabel marks a hook object of a ManifestSync (which OwnerLabel
	// names, so that the hook's changes wake it) with its phase. A hook
	// is in no inventory: never pruned, never corrected for drift.
	HookLabel = "manifestsync.dev/hook"
	// ShardLabel marks an object applied by a replica of `engine operator
	// --shards auto` with the replica's ID: its ManifestSync's own shard
	// label (operator/shard.OwnerLabel), moved with it. Each replica
	// caches only the objects carrying its own ID; the owner label, not
	// this one, says whose an object is (prune, orphan and conflicts read
	// that). An operator without sharding writes none.
	ShardLabel = shard.OwnerLabel
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

// OwnerOf is the value of OwnerLabel that the operator of instance id
// (none: "") writes for ms.
func OwnerOf(ms *v1alpha1.ManifestSync, instanceID string) string {
	if instanceID == "" {
		return ms.Namespace + "." + ms.Name
	}
	return ms.Namespace + "." + ms.Name + "_" + instanceID
}

// FieldManagerOf is the server-side apply field manager of the operator
// of instance id (none: "").
func FieldManagerOf(instanceID string) string {
	if instanceID == "" {
		return FieldManager
	}
	return FieldManager + "-" + instanceID
}

// ParseOwner splits a value of OwnerLabel into the ManifestSync and the
// instance id.
func ParseOwner(value string) (key types.NamespacedName, instance string, ok bool) {
	value, instance, _ = strings.Cut(value, "_")
	ns, name, ok := strings.Cut(value, ".")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, "", false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, instance, true
}

// OwnedBy describes the owner of an object that is not ours, from the
// value of its OwnerLabel, for a Conflict's message.
func OwnedBy(value string) string {
	key, instance, ok := ParseOwner(value)
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

// objectKey is the client key of the object id names.
func objectKey(id v1alpha1.ObjectID) client.ObjectKey {
	return client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
}
