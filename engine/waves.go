package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// WaveAnnotation orders the objects of a target: waves are applied in
// ascending order (the default is 0), pruned in descending order.
const WaveAnnotation = "manifestsync.dev/wave"

// WaveOf is obj's wave: the integer of its WaveAnnotation, 0 without one.
func WaveOf(obj *unstructured.Unstructured) (int, error) {
	v, ok := obj.GetAnnotations()[WaveAnnotation]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%s: annotation %s: %q is not an integer", v1alpha1.IDOf(obj), WaveAnnotation, v)
	}
	return n, nil
}

// Wave is the objects of one wave, in apply order.
type Wave struct {
	N       int
	Objects []*unstructured.Unstructured
}

// Waves groups objs by wave, in ascending order. Inside a wave,
// CustomResourceDefinitions come first, then Namespaces, then the rest in
// their given order, so that the kinds and namespaces the others need
// exist before them.
func Waves(objs []*unstructured.Unstructured) ([]Wave, error) {
	byWave := map[int][]*unstructured.Unstructured{}
	for _, obj := range objs {
		n, err := WaveOf(obj)
		if err != nil {
			return nil, err
		}
		byWave[n] = append(byWave[n], obj)
	}
	out := make([]Wave, 0, len(byWave))
	for n, objs := range byWave {
		slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return kindRank(a) - kindRank(b) })
		out = append(out, Wave{N: n, Objects: objs})
	}
	slices.SortFunc(out, func(a, b Wave) int { return a.N - b.N })
	return out, nil
}

// kindRank is 0 for a CustomResourceDefinition, 1 for a Namespace, 2 for
// anything else.
func kindRank(obj *unstructured.Unstructured) int {
	gvk := obj.GroupVersionKind()
	switch {
	case gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition":
		return 0
	case gvk.Group == "" && gvk.Kind == "Namespace":
		return 1
	}
	return 2
}
