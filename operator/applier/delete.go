package applier

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Delete prunes obj, the live metadata of the object id names, which the
// caller read and found ours (its OwnerLabel is the caller's owner): it
// is deleted through c, in the background, unless it is marked with
// PruneAnnotation or, since it was read, was deleted or replaced (its uid
// is a precondition). It reports whether it deleted it.
func Delete(ctx context.Context, c client.Client, id v1alpha1.ObjectID, obj *metav1.PartialObjectMetadata) (bool, error) {
	if obj.Annotations[PruneAnnotation] == PruneDisabled {
		return false, nil
	}
	uid := obj.UID
	if err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return false, nil // gone, or replaced by another object
		}
		return false, fmt.Errorf("pruning %s: %w", id.String(), err)
	}
	return true, nil
}

// Orphan removes our owner label and digest annotation from obj, the live
// metadata of the object id names, through c, leaving it otherwise as it
// is: no ManifestSync manages it any more. The shard label of a sharded
// operator goes too, when obj has one.
func Orphan(ctx context.Context, c client.Client, id v1alpha1.ObjectID, obj *metav1.PartialObjectMetadata) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`, OwnerLabel, DigestAnnotation)
	if _, ok := obj.Labels[ShardLabel]; ok {
		patch = fmt.Appendf(nil, `{"metadata":{"labels":{%q:null,%q:null},"annotations":{%q:null}}}`, OwnerLabel, ShardLabel, DigestAnnotation)
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("orphaning %s: %w", id.String(), err)
	}
	return nil
}
