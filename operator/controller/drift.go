package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Drift is a change of the fields this operator owns, as the API server's
// field management records it: another manager that changes the value of
// a field we applied, or removes it, takes it from our managed fields
// entry. A status write (its own subresource entry) or a write of fields
// we do not own leaves our entry as it was, and is not drift, although it
// changes the object's resourceVersion. Writes of this operator's other
// ManifestSyncs and targets share our field manager: they show in the
// values of our owner label and digest annotation, which only we write.
// Our entry and those two values, reduced to a digest, are recorded with
// each applied object and kept in the inventory, so that a restarted
// operator knows what it left.

// fieldsDigest is ownedFields' digest: the first 8 bytes of a sha256,
// spelled in 16 hex digits in the inventory and the cache's annotation;
// zero when the manager owns no field. Records and the cache keep one
// per object (tens of thousands in a fan-out) as a number.
type fieldsDigest uint64

// String is d in hex, or "" for zero.
func (d fieldsDigest) String() string {
	if d == 0 {
		return ""
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(d))
	return hex.EncodeToString(b[:])
}

// parseFieldsDigest reads String's spelling; anything else is zero, no
// digest (what an older operator's record without one means).
func parseFieldsDigest(s string) fieldsDigest {
	var b [8]byte
	if len(s) != 2*len(b) {
		return 0
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return 0
	}
	return fieldsDigest(binary.BigEndian.Uint64(b[:]))
}

// ownedFields is the digest of the fields manager owns in obj by
// server-side apply (not those of a subresource) and of the values of our
// owner label and digest annotation, or zero when manager owns no field.
// The field sets are compared as sets, whatever their encoding.
func ownedFields(obj metav1.Object, manager string) fieldsDigest {
	if c, ok := obj.(*cachedMeta); ok {
		return c.fields
	}
	if fields, ok := obj.GetAnnotations()[cachedFieldsKey]; ok && obj.GetManagedFields() == nil {
		return parseFieldsDigest(fields) // as the managed cache's transform found them
	}
	lines := []string{"owner " + obj.GetLabels()[OwnerLabel] + "\n", "digest " + obj.GetAnnotations()[DigestAnnotation] + "\n"}
	owns := false
	for _, e := range obj.GetManagedFields() {
		if !ownEntry(e, manager) || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		raw := e.FieldsV1.GetRawBytes()
		if err := set.FromJSON(bytes.NewReader(raw)); err == nil {
			if canon, err := set.ToJSON(); err == nil {
				raw = canon
			}
		}
		lines = append(lines, e.APIVersion+"\n"+string(raw)+"\n")
		owns = true
	}
	if !owns {
		return 0
	}
	slices.Sort(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "")))
	return fieldsDigest(binary.BigEndian.Uint64(sum[:8]))
}

// ownEntry reports whether e is manager's apply of the object itself.
func ownEntry(e metav1.ManagedFieldsEntry, manager string) bool {
	return e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
}

// cachedFieldsKey is the annotation under which the managed cache keeps
// an object's ownedFields in place of its managed fields. The API server
// refuses the key (it has a space), so that only the cache's transform
// sets it: nobody can write an object that claims a digest.
const cachedFieldsKey = "manifestsync.dev/owned fields"

// keepOwnFields is the transform of the managed objects' cache: it keeps
// of the managed fields only their digest (ownedFields), which drift is
// judged by, and drops the entries themselves (most of an object's
// metadata: with thousands of copies, a tenth of the operator's memory).
// Of the objects cached by their metadata (most kinds) it keeps only what
// the reconciler reads, as a cachedMeta; those cached whole (the kinds
// whose health needs their status) keep the rest. Applied to its own
// result, it returns it as it is.
func keepOwnFields(manager string) toolscache.TransformFunc {
	tables := newCacheTables()
	return func(in any) (any, error) {
		switch m := in.(type) {
		case *cachedMeta:
			return m, nil
		case *metav1.PartialObjectMetadata:
			return newCachedMeta(m, manager, tables), nil
		}
		obj, err := apimeta.Accessor(in)
		if err != nil || obj.GetManagedFields() == nil {
			return in, nil
		}
		annotations := obj.GetAnnotations() // the transform's to change
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[cachedFieldsKey] = ownedFields(obj, manager).String()
		obj.SetAnnotations(annotations)
		obj.SetManagedFields(nil)
		return in, nil
	}
}

// liveObject is an applied object as it is now: "" for a version when it
// is gone.
type liveObject struct {
	resourceVersion string
	fields          fieldsDigest
	// foreign is set when the object carries another replica's
	// ShardLabel (its ManifestSync moved here since it was applied): it
	// is not drift, but the object is applied again so that this
	// replica's cache holds it (see shard.go).
	foreign bool
}

// isDrift reports whether the object changed, since it was applied as o,
// in the fields we own; a change of nothing else is not drift. A record
// without the fields (of an older operator) takes any change for drift.
func (o appliedObject) isDrift(now liveObject) bool {
	switch now.resourceVersion {
	case o.resourceVersion:
		return false
	case "":
		return true
	}
	return o.item.fields == 0 || now.fields != o.item.fields
}

// moved reports whether the object, as it is now, is to be applied again
// only because another replica's shard label is on it: not drift, nor a
// drift that the policy left as it is (drifted), which applying would
// undo, nor an object policy Keep leaves as it is (kept).
func (o appliedObject) moved(now liveObject) bool {
	return now.foreign && now.resourceVersion != "" && !o.item.drifted && !o.item.kept
}

// observe reads an applied object's version and owned fields from the
// managed cache and, when the cache shows it changed in its fields (the
// cache may lag behind our own writes, or not hold it: it left our label,
// or carries another replica's shard label), from the API server. A status write costs no request. A kind the cache
// does not hold is read from the API server.
func observe(ctx context.Context, c *cluster, o appliedObject, manager string) (liveObject, error) {
	if m, found, ok := readCachedMeta(ctx, c.managed, o.item.gvk(), objectKey(o.item.id)); ok {
		if found {
			now := liveObject{resourceVersion: m.resourceVersion, fields: m.fields}
			if now.resourceVersion == o.resourceVersion {
				return liveObject{resourceVersion: o.resourceVersion, fields: o.item.fields}, nil
			}
			if !o.isDrift(now) {
				return now, nil
			}
		}
		return readLive(ctx, c, o, manager)
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(o.item.gvk())
	err := c.managed.Get(ctx, objectKey(o.item.id), meta)
	switch {
	case err == nil && meta.ResourceVersion == o.resourceVersion:
		return liveObject{resourceVersion: o.resourceVersion, fields: o.item.fields}, nil
	case err == nil:
		now := liveObject{resourceVersion: meta.ResourceVersion, fields: ownedFields(meta, manager)}
		if !o.isDrift(now) {
			return now, nil
		}
	}
	// Not in the cache, or not cached (a kind the operator may not watch,
	// or whose cache has not synced): the API server tells.
	return readLive(ctx, c, o, manager)
}

// readLive reads an applied object's version and owned fields from the
// API server, and whether another replica's shard label is on it.
func readLive(ctx context.Context, c *cluster, o appliedObject, manager string) (liveObject, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(o.item.gvk())
	if err := c.live.Get(ctx, objectKey(o.item.id), meta); err != nil {
		if apierrors.IsNotFound(err) {
			return liveObject{}, nil
		}
		return liveObject{}, fmt.Errorf("reading %s: %w", o.item.id.String(), err)
	}
	return liveObject{resourceVersion: meta.ResourceVersion, fields: ownedFields(meta, manager), foreign: c.foreign(meta)}, nil
}
