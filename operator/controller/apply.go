package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
)

// Action is what applying did to one object.
type Action string

const (
	ActionCreated    Action = "Created"
	ActionConfigured Action = "Configured"
	ActionUnchanged  Action = "Unchanged"
	// ActionSkipped is an existing object left as it is (policy Keep).
	ActionSkipped Action = "Skipped"
	// ActionConflict is an existing object that is not ours (policy Sync).
	ActionConflict Action = "Conflict"
	ActionFailed   Action = "Failed"
)

// Change is the outcome of applying one object.
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
	// nothing was sent (or in a dry run).
	health *health.Result
	// digest is the sum of the desired object's digest (DigestAnnotation).
	digest digestSum

	// result is, in a dry run, the object sent and, once applied, as the
	// API server returned it; DryRun compares it with the live object.
	// Real applies keep nothing of it: the outcomes of a sync live until
	// its status is written, and with thousands of targets the objects
	// the API server returned would be most of the operator's memory.
	result *unstructured.Unstructured
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

// applier applies the objects of one ManifestSync to one cluster, under
// the resource policies of DESIGN.md §5.
type applier struct {
	client  client.Client // writes
	live    client.Reader // reads from the API server
	managed client.Reader // metadata of the objects carrying OwnerLabel, cached
	owner   string        // OwnerLabel's value
	manager string        // field manager; "" is FieldManager
	policy  v1alpha1.ResourcePolicy
	// dryRun makes every write a server-side dry run (engine diff).
	dryRun bool
	// guard refuses the writes of a write war; nil refuses none.
	guard *writeGuard
	// health judges the objects the API server returns; nil judges none.
	health *health.Checker
}

// apply applies desired, whose digest is given, and says what happened.
// desired is sent as asApplied makes it; the change keeps digest.
func (a *applier) apply(ctx context.Context, desired *unstructured.Unstructured, digest, target string) Change {
	ch := Change{Item: itemOf(desired, target), digest: sumOf(digest)}
	policy, err := a.policyOf(desired)
	if err != nil {
		return ch.failed(err)
	}
	sent, annotated := asApplied(desired, digest) // a Secret's stringData as data
	obj := sent.DeepCopy()
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[OwnerLabel] = a.owner
	obj.SetLabels(labels)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[DigestAnnotation] = annotated
	obj.SetAnnotations(annotations)

	if policy == v1alpha1.PolicyOverwrite {
		return a.overwrite(ctx, obj, ch)
	}
	live, err := a.liveMetadata(ctx, obj)
	if err != nil {
		return ch.failed(err)
	}
	ours := live != nil && live.Labels[OwnerLabel] == a.owner
	switch policy {
	case v1alpha1.PolicyKeep:
		if live == nil {
			return a.ssa(ctx, obj, nil, false, ch)
		}
		if ours {
			ch.Action, ch.ResourceVersion = ActionUnchanged, live.ResourceVersion
			ch.Fields = ownedFields(live, a.fieldManager())
		} else {
			ch.Action = ActionSkipped
		}
		return ch
	case v1alpha1.PolicyAdopt:
		return a.ssa(ctx, obj, live, true, ch)
	default: // Sync
		if live != nil && !ours {
			ch.Action = ActionConflict
			ch.Err = fmt.Errorf("%s exists and is not managed by this ManifestSync%s", ch.Item.id.String(), ownedBy(live.Labels[OwnerLabel]))
			return ch
		}
		return a.ssa(ctx, obj, live, true, ch)
	}
}

func (c Change) failed(err error) Change {
	c.Action, c.Err = ActionFailed, err
	return c
}

// policyOf is the object's resource policy: its annotation, else the
// ManifestSync's.
func (a *applier) policyOf(obj *unstructured.Unstructured) (v1alpha1.ResourcePolicy, error) {
	p, ok := obj.GetAnnotations()[PolicyAnnotation]
	if !ok {
		if a.policy == "" {
			return v1alpha1.PolicySync, nil
		}
		return a.policy, nil
	}
	switch v1alpha1.ResourcePolicy(p) {
	case v1alpha1.PolicySync, v1alpha1.PolicyKeep, v1alpha1.PolicyAdopt, v1alpha1.PolicyOverwrite:
		return v1alpha1.ResourcePolicy(p), nil
	}
	return "", fmt.Errorf("annotation %s: %q is not one of Sync, Keep, Adopt, Overwrite", PolicyAnnotation, p)
}

// liveMetadata returns the metadata of the live object, or nil when there
// is none. An object the managed cache holds as ours is taken from there;
// anything else is read from the API server, since the cache holds only
// owned objects.
func (a *applier) liveMetadata(ctx context.Context, obj *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(obj.GroupVersionKind())
	key := client.ObjectKeyFromObject(obj)
	if err := a.managed.Get(ctx, key, meta); err == nil && meta.Labels[OwnerLabel] == a.owner {
		return meta, nil
	}
	if err := a.live.Get(ctx, key, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", v1alpha1.IDOf(obj).String(), err)
	}
	return meta, nil
}

// fieldManager is the field manager of a's writes.
func (a *applier) fieldManager() string {
	if a.manager == "" {
		return FieldManager
	}
	return a.manager
}

// ssa server-side applies obj; live is the object before, if any.
func (a *applier) ssa(ctx context.Context, obj *unstructured.Unstructured, live *metav1.PartialObjectMetadata, force bool, ch Change) Change {
	opts := []client.ApplyOption{client.FieldOwner(a.fieldManager())}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	if a.dryRun {
		opts = append(opts, client.DryRunAll)
		ch.result = obj
	}
	if err := a.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), opts...); err != nil {
		return ch.failed(fmt.Errorf("applying %s: %w", ch.Item.id.String(), err))
	}
	ch.ResourceVersion = obj.GetResourceVersion()
	ch.Fields = ownedFields(obj, a.fieldManager())
	if a.health != nil && !a.dryRun {
		res := a.health.Check(obj)
		ch.health = &res
	}
	switch {
	case live == nil:
		ch.Action = ActionCreated
	case live.ResourceVersion != ch.ResourceVersion:
		ch.Action = ActionConfigured
	default:
		ch.Action = ActionUnchanged
	}
	return ch
}

// overwrite makes the live object exactly obj: the fields other managers
// own are handed to us first, so that the apply removes those we do not
// set; a change the API server refuses as immutable recreates the object.
func (a *applier) overwrite(ctx context.Context, obj *unstructured.Unstructured, ch Change) Change {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	if err := a.live.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return a.ssa(ctx, obj, nil, true, ch)
		}
		return ch.failed(fmt.Errorf("reading %s: %w", ch.Item.id.String(), err))
	}
	if a.dryRun {
		return a.replaceDryRun(ctx, obj, live, ch)
	}
	if err := a.takeOverFields(ctx, live, obj.GetAPIVersion()); err != nil {
		return ch.failed(fmt.Errorf("taking over the fields of %s: %w", ch.Item.id.String(), err))
	}
	before := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: live.GetResourceVersion()}}
	out := a.ssa(ctx, obj.DeepCopy(), before, true, ch)
	if out.Action != ActionFailed || !immutable(out.Err) {
		return out
	}
	uid := live.GetUID()
	if err := a.client.Delete(ctx, live, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return ch.failed(fmt.Errorf("recreating %s: deleting: %w", ch.Item.id.String(), err))
	}
	out = a.ssa(ctx, obj, nil, true, ch)
	if out.Action == ActionCreated {
		out.Action = ActionConfigured // recreated
	}
	return out
}

// immutable reports whether err is the API server refusing to change an
// immutable field.
func immutable(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "immutable")
}

// takeOverFields rewrites live's managedFields so that our apply manager
// owns every field that other managers own (of the same API version, not
// of subresources). The next apply then removes those fields it does not
// set, as it removes fields it stopped setting itself.
func (a *applier) takeOverFields(ctx context.Context, live *unstructured.Unstructured, apiVersion string) error {
	var (
		kept    []metav1.ManagedFieldsEntry
		merged  = &fieldpath.Set{}
		foreign bool
	)
	for _, e := range live.GetManagedFields() {
		if e.Subresource != "" || e.APIVersion != apiVersion || e.FieldsV1 == nil {
			kept = append(kept, e)
			continue
		}
		if e.Manager != a.fieldManager() || e.Operation != metav1.ManagedFieldsOperationApply {
			foreign = true
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
			return fmt.Errorf("managedFields of %q: %w", e.Manager, err)
		}
		merged = merged.Union(set)
	}
	if !foreign {
		return nil
	}
	raw, err := merged.ToJSON()
	if err != nil {
		return err
	}
	now := metav1.NewTime(time.Now().UTC())
	fields := append(kept, metav1.ManagedFieldsEntry{
		Manager:    a.fieldManager(),
		Operation:  metav1.ManagedFieldsOperationApply,
		APIVersion: apiVersion,
		Time:       &now,
		FieldsType: "FieldsV1",
		FieldsV1:   metav1.NewFieldsV1(string(raw)),
	})
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": fields},
	})
	if err != nil {
		return err
	}
	return a.client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch))
}
