package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Bodies read for object sets are kept while some source of the
// ManifestSync holds them, and dropped once none does: two sets over one
// namespace do not drop each other's, so neither reads them again.
func TestForgetSetBodies(t *testing.T) {
	secret := corev1.SchemeGroupVersion.WithKind("Secret")
	ref := func(name string) objectRef { return objectRef{gvk: secret, namespace: "p", name: name} }
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: "p"}, Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
		{Name: "a", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret"}},
		{Name: "b", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret"}},
		{Name: "one", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "single"}},
	}}}
	st := &syncState{sources: map[objectRef]*engine.Snapshot{}}
	for _, n := range []string{"x", "y", "z", "single"} {
		st.sources[ref(n)] = &engine.Snapshot{}
	}
	forgetSetBodies(ms, "a", map[objectRef]bool{ref("x"): true, ref("single"): true}, st)
	forgetSetBodies(ms, "b", map[objectRef]bool{ref("y"): true, ref("z"): true}, st)
	// a drops x and single; b still holds neither; single is an object source.
	forgetSetBodies(ms, "a", map[objectRef]bool{ref("z"): true}, st)
	for n, want := range map[string]bool{"x": false, "y": true, "z": true, "single": true} {
		if _, ok := st.sources[ref(n)]; ok != want {
			t.Errorf("body of %s kept: %v, want %v", n, ok, want)
		}
	}
	// b leaves the spec: what only it held goes at the next read of a.
	ms.Spec.Sources = ms.Spec.Sources[:1]
	forgetSetBodies(ms, "a", map[objectRef]bool{}, st)
	for _, n := range []string{"y", "z"} {
		if _, ok := st.sources[ref(n)]; ok {
			t.Errorf("body of %s kept after every set let it go", n)
		}
	}
}
