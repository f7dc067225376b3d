package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// Action is what applying did to one object (ssa.Action).
type Action = ssa.Action

const (
	ActionCreated    = ssa.ActionCreated
	ActionConfigured = ssa.ActionConfigured
	ActionUnchanged  = ssa.ActionUnchanged
	ActionSkipped    = ssa.ActionSkipped
	ActionConflict   = ssa.ActionConflict
	ActionFailed     = ssa.ActionFailed
)

// Change is the outcome of applying one object, as a sync keeps it: the
// applier's change (ssa.Change) reduced to what the records, the
// inventory and status need, so that nothing of the object the API server
// returned outlives the apply.
type Change struct {
	Item   inventoryItem
	Action Action
	// ResourceVersion is the object's after the apply, when it is ours.
	ResourceVersion string
	// Fields is the digest of the fields we own after the apply, when it
	// is ours (ownedFields).
	Fields fieldsDigest
	// Err says why the object failed or conflicts.
	Err error
	// health is the object's health as the apply returned it; nil when
	// nothing was sent.
	health *health.Result
	// digest is the sum of the desired object's digest (DigestAnnotation).
	digest digestSum
}

// ours reports whether the object now carries our owner label.
func (c Change) ours() bool {
	switch c.Action {
	case ActionCreated, ActionConfigured, ActionUnchanged:
		return true
	}
	return false
}

// wrote reports whether the apply changed the object.
func (c Change) wrote() bool {
	return c.Action == ActionCreated || c.Action == ActionConfigured
}

// applier applies the objects of one ManifestSync to one cluster with the
// applier package's Manager (imported as ssa, the name Flux gives its own), and judges what it returns: the fields we own
// (drift) and the health of the object.
type applier struct {
	client  client.Client // writes
	live    client.Reader // reads from the API server
	managed client.Reader // metadata of the objects carrying OwnerLabel, cached
	owner   string        // OwnerLabel's value
	shard   string        // ShardLabel's value; "" writes none
	manager string        // field manager; "" is FieldManager
	policy  v1alpha1.ResourcePolicy
	// guard refuses the writes of a write war; nil refuses none.
	guard *writeGuard
	// health judges the objects the API server returns; nil judges none.
	health *health.Checker
}

// apply applies desired, whose digest is given, and says what happened.
// desired is sent as ssa.AsApplied makes it; the change keeps digest.
func (a *applier) apply(ctx context.Context, desired *unstructured.Unstructured, digest, target string) Change {
	m := ssa.Manager{Client: a.client, Live: a.live, Managed: a.managed, Owner: a.owner, Shard: a.shard, FieldManager: a.manager, Policy: a.policy}
	res := m.Apply(ctx, desired, digest)
	ch := Change{Item: itemOf(desired, target), Action: res.Action, ResourceVersion: res.ResourceVersion, Err: res.Err, digest: sumOf(digest)}
	switch {
	case !res.Ours():
	case res.Applied != nil:
		ch.Fields = ownedFields(res.Applied, a.fieldManager())
		if a.health != nil {
			h := a.health.Check(res.Applied)
			ch.health = &h
		}
	case res.Kept != nil:
		ch.Fields = ownedFields(res.Kept, a.fieldManager())
		ch.Item.kept = true
	}
	return ch
}

// fieldManager is the field manager of a's writes.
func (a *applier) fieldManager() string {
	if a.manager == "" {
		return FieldManager
	}
	return a.manager
}
