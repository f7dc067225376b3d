package applier

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
)

// Action is what applying did, or would do, to one object.
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

// Change is the outcome of applying one object: an entry of the change
// set of a sync.
type Change struct {
	// ID and Version name the object as the desired one does.
	ID      v1alpha1.ObjectID
	Version string
	Action  Action
	// ResourceVersion is the object's after the apply, when it is ours.
	ResourceVersion string
	// Err says why the object failed or conflicts.
	Err error
	// Applied is the object as the apply sent it and the API server
	// returned it, when an apply of it succeeded; in a dry run, the object
	// sent even when the API server refused it (DryRun compares it with
	// the live object). The reconciler reads the fields it owns and its
	// health from it, and keeps nothing of it: with thousands of targets
	// the objects the API server returned would be most of the operator's
	// memory.
	Applied *unstructured.Unstructured
	// Kept is the live metadata of an object of ours that policy Keep
	// left as it is.
	Kept *metav1.PartialObjectMetadata
}

// Ours reports whether the object now carries our owner label.
func (c Change) Ours() bool {
	switch c.Action {
	case ActionCreated, ActionConfigured, ActionUnchanged:
		return true
	}
	return false
}

// Manager applies the objects of one ManifestSync to one cluster, under
// the resource policies of DESIGN.md §5. Its zero DryRun writes; a
// Manager keeps nothing between calls.
type Manager struct {
	Client client.Client // writes
	Live   client.Reader // reads from the API server
	// Managed holds the metadata of the objects carrying OwnerLabel (the
	// reconciler's cache); an object it holds as ours is taken from
	// there, anything else is read through Live.
	Managed client.Reader
	// Owner is OwnerLabel's value (OwnerOf); FieldManager the field
	// manager of the writes, "" being FieldManager.
	Owner        string
	FieldManager string
	// Shard is ShardLabel's value, the ID of the replica that applies
	// (--shards auto); "" writes no ShardLabel.
	Shard string
	// Policy is the ManifestSync's spec.policy.resources; "" is Sync.
	Policy v1alpha1.ResourcePolicy
	// DryRun makes every write a server-side dry run (engine diff).
	DryRun bool
}

// Apply applies desired, whose digest (the engine's) is given, and says
// what happened. desired is sent as AsApplied makes it, with our owner
// label and digest annotation; desired itself is not changed.
func (a *Manager) Apply(ctx context.Context, desired *unstructured.Unstructured, digest string) Change {
	ch := Change{ID: v1alpha1.IDOf(desired), Version: desired.GroupVersionKind().Version}
	policy, err := a.policyOf(desired)
	if err != nil {
		return ch.failed(err)
	}
	sent, annotated := AsApplied(desired, digest) // a Secret's stringData as data
	obj := sent.DeepCopy()
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[OwnerLabel] = a.Owner
	if a.Shard != "" {
		labels[ShardLabel] = a.Shard
	}
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
	ours := live != nil && live.Labels[OwnerLabel] == a.Owner
	switch policy {
	case v1alpha1.PolicyKeep:
		if live == nil {
			return a.ssa(ctx, obj, nil, false, ch)
		}
		if ours {
			ch.Action, ch.ResourceVersion, ch.Kept = ActionUnchanged, live.ResourceVersion, live
		} else {
			ch.Action = ActionSkipped
		}
		return ch
	case v1alpha1.PolicyAdopt:
		return a.ssa(ctx, obj, live, true, ch)
	default: // Sync
		if live != nil && !ours {
			ch.Action = ActionConflict
			ch.Err = fmt.Errorf("%s exists and is not managed by this ManifestSync%s", ch.ID.String(), OwnedBy(live.Labels[OwnerLabel]))
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
func (a *Manager) policyOf(obj *unstructured.Unstructured) (v1alpha1.ResourcePolicy, error) {
	p, ok := obj.GetAnnotations()[PolicyAnnotation]
	if !ok {
		if a.Policy == "" {
			return v1alpha1.PolicySync, nil
		}
		return a.Policy, nil
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
func (a *Manager) liveMetadata(ctx context.Context, obj *unstructured.Unstructured) (*metav1.PartialObjectMetadata, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(obj.GroupVersionKind())
	key := client.ObjectKeyFromObject(obj)
	if a.Managed != nil {
		if err := a.Managed.Get(ctx, key, meta); err == nil && meta.Labels[OwnerLabel] == a.Owner {
			return meta, nil
		}
	}
	if err := a.Live.Get(ctx, key, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", v1alpha1.IDOf(obj).String(), err)
	}
	return meta, nil
}

// fieldManager is the field manager of a's writes.
func (a *Manager) fieldManager() string {
	if a.FieldManager == "" {
		return FieldManager
	}
	return a.FieldManager
}

// ssa server-side applies obj; live is the object before, if any.
func (a *Manager) ssa(ctx context.Context, obj *unstructured.Unstructured, live *metav1.PartialObjectMetadata, force bool, ch Change) Change {
	opts := []client.ApplyOption{client.FieldOwner(a.fieldManager())}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	if a.DryRun {
		opts = append(opts, client.DryRunAll)
		ch.Applied = obj
	}
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), opts...); err != nil {
		return ch.failed(fmt.Errorf("applying %s: %w", ch.ID.String(), err))
	}
	ch.ResourceVersion, ch.Applied = obj.GetResourceVersion(), obj
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
func (a *Manager) overwrite(ctx context.Context, obj *unstructured.Unstructured, ch Change) Change {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	if err := a.Live.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		if apierrors.IsNotFound(err) {
			return a.ssa(ctx, obj, nil, true, ch)
		}
		return ch.failed(fmt.Errorf("reading %s: %w", ch.ID.String(), err))
	}
	if a.DryRun {
		return a.replaceDryRun(ctx, obj, live, ch)
	}
	if err := a.takeOverFields(ctx, live, obj.GetAPIVersion()); err != nil {
		return ch.failed(fmt.Errorf("taking over the fields of %s: %w", ch.ID.String(), err))
	}
	before := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: live.GetResourceVersion()}}
	out := a.ssa(ctx, obj.DeepCopy(), before, true, ch)
	if out.Action != ActionFailed || !immutable(out.Err) {
		return out
	}
	uid := live.GetUID()
	if err := a.Client.Delete(ctx, live, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return ch.failed(fmt.Errorf("recreating %s: deleting: %w", ch.ID.String(), err))
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
func (a *Manager) takeOverFields(ctx context.Context, live *unstructured.Unstructured, apiVersion string) error {
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
	return a.Client.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch))
}
