// Package objdiff shows Kubernetes objects to people without their
// Secrets' values: a Secret's data and stringData, and kubectl's
// last-applied annotation, masked so that a changed value is still told
// from an unchanged one (MaskSecret), and the unified diff of two versions
// of an object as YAML (Write). `engine diff` and the web UI (ui/inspect)
// show objects and diffs through it, so that both mask alike.
//
// It renders data only: it reads no cluster and no file.
package objdiff

import (
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/operator/applier"
)

// Masks of Secret values, as kubectl diff shows them: the same on both
// sides when the value is unchanged.
const (
	MaskSame   = "***"
	MaskBefore = "*** (before)"
	MaskAfter  = "*** (after)"
)

// lastApplied is kubectl's annotation; on a Secret it holds the data.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// RedactDiffs masks the evaluation's Secret values in the errors of diffs
// and in the objects other than Secrets (whose values MaskSecret hides,
// telling changed ones from unchanged).
func RedactDiffs(diffs []applier.ObjectDiff, red *redact.Redactor) {
	for i := range diffs {
		d := &diffs[i]
		d.Err = red.Error(d.Err)
		for _, o := range []*unstructured.Unstructured{d.Live, d.Desired} {
			if o != nil && !redact.IsSecret(o.Object) {
				o.Object = red.Object(o.Object)
			}
		}
	}
}

// Write writes the unified diff of two versions of one object, YAML
// against YAML, from and to naming them; nil is a side where the object is
// not (all added, all removed). Secret values are masked as MaskSecret
// masks them, telling changed values from unchanged, and every value red
// knows (nil: none) is masked wherever else it is.
func Write(w io.Writer, from, to string, before, after *unstructured.Unstructured, red *redact.Redactor) error {
	before, after = MaskSecret(before, after)
	a, err := YAML(redactMasked(before, red))
	if err != nil {
		return err
	}
	b, err := YAML(redactMasked(after, red))
	if err != nil {
		return err
	}
	return difflib.WriteUnifiedDiff(w, difflib.UnifiedDiff{
		A:        Lines(a),
		B:        Lines(b),
		FromFile: from,
		ToFile:   to,
		Context:  3,
	})
}

// Show is one object as people see it: a Secret's values masked as
// MaskSecret(obj, obj) masks them (***), every value red knows (nil:
// none) masked wherever else it is. obj is not modified.
func Show(obj *unstructured.Unstructured, red *redact.Redactor) *unstructured.Unstructured {
	obj, _ = MaskSecret(obj, obj)
	return redactMasked(obj, red)
}

// redactMasked is obj, masked by MaskSecret, with the values red knows
// masked too; the masks of a Secret's data and stringData stay as they
// are.
func redactMasked(obj *unstructured.Unstructured, red *redact.Redactor) *unstructured.Unstructured {
	if obj == nil || red == nil {
		return obj
	}
	if !redact.IsSecret(obj.Object) {
		return &unstructured.Unstructured{Object: red.Object(obj.Object)}
	}
	rest := maps.Clone(obj.Object)
	delete(rest, "data")
	delete(rest, "stringData")
	rest = red.Object(rest)
	for _, k := range []string{"data", "stringData"} {
		if v, ok := obj.Object[k]; ok {
			rest[k] = v
		}
	}
	return &unstructured.Unstructured{Object: rest}
}

// Lines splits text into lines, each with its newline; none for "".
func Lines(text string) []string {
	if text == "" {
		return nil
	}
	return difflib.SplitLines(strings.TrimSuffix(text, "\n"))
}

// YAML is obj as YAML; "" for nil.
func YAML(obj *unstructured.Unstructured) (string, error) {
	if obj == nil {
		return "", nil
	}
	b, err := yaml.Marshal(obj.Object)
	return string(b), err
}

// MaskSecret returns copies of a Secret's two sides with every value of
// data and stringData, and kubectl's last-applied annotation, replaced by a
// mask that still tells changed values from unchanged ones. Other objects
// are returned as they are. MaskSecret(obj, obj) masks one object's values
// all as MaskSame.
func MaskSecret(live, desired *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	isSecret := func(o *unstructured.Unstructured) bool {
		return o != nil && o.GetKind() == "Secret" && o.GroupVersionKind().Group == ""
	}
	if !isSecret(live) && !isSecret(desired) {
		return live, desired
	}
	same := live == desired
	if live != nil {
		live = live.DeepCopy()
	}
	if desired != nil {
		desired = desired.DeepCopy()
	}
	if same {
		// One object: mask its copy once, each value alike.
		desired = live
	}
	for _, path := range [][]string{{"data"}, {"stringData"}} {
		maskValues(mapField(live, path...), mapField(desired, path...), nil)
	}
	maskValues(mapField(live, "metadata", "annotations"), mapField(desired, "metadata", "annotations"), []string{lastApplied})
	return live, desired
}

// maskValues masks the values of before and after in place (those of the
// given keys only, when there are any).
func maskValues(before, after map[string]any, only []string) {
	masked := func(k string) bool { return only == nil || slices.Contains(only, k) }
	same := map[string]bool{}
	for k, bv := range before {
		if av, ok := after[k]; ok && reflect.DeepEqual(av, bv) {
			same[k] = true
		}
	}
	for _, m := range []struct {
		values map[string]any
		mask   string
	}{{before, MaskBefore}, {after, MaskAfter}} {
		for k := range m.values {
			switch {
			case !masked(k):
			case same[k]:
				m.values[k] = MaskSame
			default:
				m.values[k] = m.mask
			}
		}
	}
}

// mapField is the map at path in obj, itself rather than a copy; nil when
// there is none.
func mapField(obj *unstructured.Unstructured, path ...string) map[string]any {
	if obj == nil {
		return nil
	}
	m, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
	out, _ := m.(map[string]any)
	return out
}
