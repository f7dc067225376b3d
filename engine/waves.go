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

// WaveOf is obj's wave: the integer of its WaveAnnotation; without one,
// of Argo CD's ArgoWaveAnnotation; without either, of a Helm hook's
// HelmHookWeightAnnotation; 0 without any.
func WaveOf(obj *unstructured.Unstructured) (int, error) {
	ann := obj.GetAnnotations()
	for _, key := range []string{WaveAnnotation, ArgoWaveAnnotation, HelmHookWeightAnnotation} {
		v, ok := ann[key]
		if !ok {
			continue
		}
		if _, helm := ann[HelmHookAnnotation]; key == HelmHookWeightAnnotation && !helm {
			break // a weight means nothing on an object that is not a Helm hook
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%s: annotation %s: %q is not an integer", v1alpha1.IDOf(obj), key, v)
		}
		return n, nil
	}
	return 0, nil
}

// WaveOfAnnotations is the wave of an object with annotations ann, as
// WaveOf reads it; an annotation that is not an integer counts as 0.
func WaveOfAnnotations(ann map[string]string) int {
	o := &unstructured.Unstructured{Object: map[string]any{}}
	o.SetAnnotations(ann)
	n, _ := WaveOf(o)
	return n
}

// Wave is the objects of one wave, in apply order.
type Wave struct {
	N       int
	Objects []*unstructured.Unstructured
}

// Waves groups the ordinary objects of objs by wave, in ascending order
// (hooks, and the objects never applied, are left to PlanHooks). Inside a
// wave, CustomResourceDefinitions come first, then Namespaces, then the
// rest in their given order, so that the kinds and namespaces the others
// need exist before them.
func Waves(objs []*unstructured.Unstructured) ([]Wave, error) {
	byWave := map[int][]*unstructured.Unstructured{}
	for _, obj := range objs {
		switch h, skip, err := HookOf(obj); {
		case err != nil:
			return nil, err
		case h != nil || skip:
			continue
		}
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
