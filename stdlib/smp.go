//go:build !leanoperator

package stdlib

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/filters/patchstrategicmerge"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// StrategicMerge applies patch to obj as a Kubernetes strategic merge patch
// with kustomize's semantics (sigs.k8s.io/kustomize/api/filters/patchstrategicmerge):
// the lists of known Kubernetes kinds merge by their keys (containers by name,
// ports by containerPort, ...), other lists are replaced, and a null value
// deletes its field. The directive "$patch" is honoured in a map
// ({"$patch": "replace", ...} replaces the map, {"$patch": "delete"} removes it
// or, in a merged list, the element with the same key) and as a list element
// ([{"$patch": "replace"}, ...] replaces the list). Like kustomize,
// StrategicMerge does not implement $retainKeys, $setElementOrder or
// $deleteFromPrimitiveList. If the patch deletes the whole object
// ("$patch: delete" at its top level), StrategicMerge returns nil and no error.
func StrategicMerge(obj, patch map[string]any) (map[string]any, error) {
	if obj == nil {
		obj = map[string]any{}
	}
	if patch == nil {
		patch = map[string]any{}
	}
	objNode, err := kyaml.FromMap(obj)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	patchNode, err := kyaml.FromMap(patch)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	out, err := patchstrategicmerge.Filter{Patch: patchNode}.Filter([]*kyaml.RNode{objNode})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, nil
	}
	j, err := out[0].MarshalJSON()
	if err != nil {
		return nil, err
	}
	return unmarshalObject(j)
}
