package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
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

// An error about a namespace a tenant's namespaceSelector picked (the
// operator's watch refused there, say) does not name that namespace: the
// tenant may not list namespaces. One the tenant named itself is said.
func TestSetErrorsHideSelectedNamespaces(t *testing.T) {
	ctx := context.Background()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "",
		errors.New(`User "system:serviceaccount:ops:operator" cannot list resource "secrets" in API group "" in the namespace "hidden"`))
	bySelector := &engine.ObjectSet{NamespaceSelector: labels.Everything()}
	got := unnamed(ctx, bySelector, "hidden", forbidden).Error()
	if strings.Contains(got, `"hidden"`) || !strings.Contains(got, `in the namespace "<namespace>"`) || !strings.Contains(got, "forbidden") {
		t.Errorf("selected namespace: %q", got)
	}
	// A longer word that holds the name is left alone; Kind ns/name is not.
	got = unnamed(ctx, bySelector, "web", errors.New(`the webhook of Secret web/db failed in "web"`)).Error()
	if got != `the webhook of Secret <namespace>/db failed in "<namespace>"` {
		t.Errorf("words: %q", got)
	}
	named := &engine.ObjectSet{Namespace: "hidden"}
	if err := unnamed(ctx, named, "hidden", forbidden); err != forbidden {
		t.Errorf("a namespace the tenant named: %v, want the error as it was", err)
	}
}

// A watch of an object set's selector cache whose list the API server
// refuses (RBAC changed after the access check) is removed, not left
// retrying forever; the kind is read directly (the API server's 403 fails
// the set at once) and not watched again before accessRecheck.
func TestRefusedSetWatchIsRemoved(t *testing.T) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "PodTemplate"}
	key := setCacheKey{namespace: "team-a", selector: "app=web"}
	wk := setWatchKey{setCacheKey: key, gvk: gvk}
	selected := &removals{removed: make(chan schema.GroupVersionKind, 1)}
	s := &objectSets{
		log:    logr.Discard(),
		caches: map[setCacheKey]*namespaceCache{key: {Cache: selected}},
		since:  map[setWatchKey]time.Time{wk: time.Now()},
	}
	access := &kindAccess{denied: map[accessKey]time.Time{}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "podtemplates"}, "", nil)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, forbidden },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return nil, forbidden
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.onForbidden(access, key, toolscache.NewSharedIndexInformer)(lw, metadataProbe(gvk), 0, toolscache.Indexers{}).RunWithContext(ctx)
	select {
	case got := <-selected.removed:
		if got != gvk {
			t.Errorf("removed the informer of %v, want %v", got, gvk)
		}
	case <-time.After(timeout):
		t.Fatal("the refused watch was not removed")
	}
	if _, ok := s.watching(wk); ok {
		t.Error("the kind is still taken for watched: its lists would wait for a cache that never syncs")
	}
	if ok, err := access.watchable(ctx, gvk, key.namespace); ok || err != nil {
		t.Errorf("watchable after the refusal: %v, %v; want false until accessRecheck", ok, err)
	}
}
