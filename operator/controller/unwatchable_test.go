package controller

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// removals is a cache that records the informers removed from it.
type removals struct {
	cache.Cache
	removed chan schema.GroupVersionKind
}

func (r *removals) RemoveInformer(_ context.Context, obj client.Object) error {
	r.removed <- obj.GetObjectKind().GroupVersionKind()
	return nil
}

// A watch whose list the API server refuses (RBAC changed after it
// started) is removed, not left retrying (and logging) forever; its kind
// is read directly from then on, and not watched again before
// accessRecheck. What a tenant whose transform outputs such a kind gets:
// its objects read one by one, the API server's 403 if those are refused.
func TestRefusedWatchIsRemoved(t *testing.T) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "PodTemplate"}
	key := watchKey{gvk: gvk, purpose: watchManaged}
	managed := &removals{removed: make(chan schema.GroupVersionKind, 1)}
	w := &watches{
		managedCache: managed,
		access:       &kindAccess{denied: map[accessKey]time.Time{}},
		log:          logr.Discard(),
		started:      map[watchKey]bool{key: true},
		since:        map[watchKey]time.Time{key: time.Now()},
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "podtemplates"}, "", nil)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return nil, forbidden },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return nil, forbidden
		},
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	inf := w.onForbidden("", toolscache.NewSharedIndexInformer)(lw, obj, 0, toolscache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.RunWithContext(ctx)
	select {
	case got := <-managed.removed:
		if got != gvk {
			t.Errorf("removed the informer of %v, want %v", got, gvk)
		}
	case <-time.After(timeout):
		t.Fatal("the refused watch was not removed")
	}
	if _, ok := w.watching(key); ok {
		t.Error("the kind is still taken for watched: its reads would wait for a cache that never syncs")
	}
	if ok, err := w.access.watchable(ctx, gvk, ""); ok || err != nil {
		t.Errorf("watchable after the refusal: %v, %v; want false until accessRecheck", ok, err)
	}
}
