package applier

import (
	"encoding/base64"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/engine"
)

// A Secret's stringData is write-only: the API server merges it into data
// (base64-encoded, stringData winning over data for a key in both) and
// stores no stringData. A Secret applied with stringData leaves our field
// manager owning f:stringData, a field no object has, and owning nothing
// of data: a hand edit of data then changes none of our fields, and drift
// (a change of the fields we own, as the reconciler judges it) never sees it. So every write
// that applies an object sends it as AsApplied makes it: a Secret's
// stringData already merged into data, as Flux's server-side apply does,
// so that we own the f:data keys the API server keeps.

// AsApplied is desired as the applier sends it, and the value of its
// DigestAnnotation. A core/v1 Secret with stringData is a copy with
// stringData merged into data, and its annotation the digest of that
// copy, so that an object a former operator applied with stringData (its
// annotation the digest of the desired object as the engine made it) is
// applied once more, owning data, rather than taken as applied (the reconciler's restore of its records).
// Any other object is desired itself, its annotation the engine's digest.
// desired is never changed.
func AsApplied(desired *unstructured.Unstructured, digest string) (*unstructured.Unstructured, string) {
	obj, changed := mergeStringData(desired)
	if !changed {
		return desired, digest
	}
	return obj, engine.ObjectDigest(obj.Object)
}

// mergeStringData is obj with a core/v1 Secret's stringData merged into
// data, base64-encoded, as the API server merges it, and changed set; a
// copy, obj is not changed. Any other object, or a Secret whose
// stringData or data is not a map of strings (the API server refuses it,
// and its message is better than ours), is obj itself, changed false.
func mergeStringData(obj *unstructured.Unstructured) (*unstructured.Unstructured, bool) {
	if obj.GetAPIVersion() != "v1" || obj.GetKind() != "Secret" {
		return obj, false
	}
	raw, ok := obj.Object["stringData"]
	if !ok {
		return obj, false
	}
	plain, ok := raw.(map[string]any)
	if !ok && raw != nil {
		return obj, false
	}
	if !stringsOnly(plain) {
		return obj, false
	}
	var data map[string]any
	switch d := obj.Object["data"].(type) {
	case map[string]any:
		if !stringsOnly(d) {
			return obj, false
		}
		data = d
	case nil:
	default:
		return obj, false
	}
	merged := make(map[string]any, len(data)+len(plain))
	for k, v := range data {
		merged[k] = v
	}
	for k, v := range plain {
		merged[k] = base64.StdEncoding.EncodeToString([]byte(v.(string)))
	}
	// A shallow copy: only the top level changes, the rest is shared with
	// obj and read only.
	out := &unstructured.Unstructured{Object: make(map[string]any, len(obj.Object))}
	for k, v := range obj.Object {
		if k != "stringData" && k != "data" {
			out.Object[k] = v
		}
	}
	if len(merged) > 0 {
		out.Object["data"] = merged
	}
	return out, true
}

// stringsOnly reports whether every value of m is a string.
func stringsOnly(m map[string]any) bool {
	for _, v := range m {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return true
}
