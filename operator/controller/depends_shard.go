package controller

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Dependencies under sharding. A replica of --shards auto caches only the
// ManifestSyncs of its share, but a dependency of one of them may be
// another replica's. The first time a dependency is not in the replica's
// cache, the replica starts its dependency view: one more cache, of every
// ManifestSync, holding of each only what checkDependencies reads (name,
// generation, deletion, spec.dependsOn and the Ready condition without
// its message: dependencyFields), and its watch feeds forDependants as
// the replica's own cache does. So a dependency owned by another replica
// wakes its dependants at once, as one of the same replica does, and
// cycles across replicas are found. Until the view has synced, a
// dependency it lacks is read from the API server; after, a dependency
// it does not hold does not exist. A replica none of whose ManifestSyncs
// depends on another replica's never starts it.
type dependencyView struct {
	// start makes and starts the cache, and the controller's watch on it.
	start func(ctx context.Context) (cache.Informer, cache.Cache, error)
	// direct reads from the API server until the view has synced.
	direct client.Reader

	mu       sync.Mutex
	informer cache.Informer
	cache    cache.Cache
}

// setupDependencyView makes r's dependency view: for a replica of
// --shards auto only.
func (r *Reconciler) setupDependencyView(mgr ctrl.Manager, w *watches) {
	if r.Options.ShardID == "" {
		return
	}
	r.deps = &dependencyView{direct: r.APIReader, start: func(ctx context.Context) (cache.Informer, cache.Cache, error) {
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			HTTPClient:       mgr.GetHTTPClient(),
			Scheme:           mgr.GetScheme(),
			Mapper:           mgr.GetRESTMapper(),
			DefaultTransform: dependencyFields,
			NewInformer:      r.Options.APIServer.NewInformer,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("creating the cache of dependencies: %w", err)
		}
		if err := mgr.Add(cacheRunnable{c}); err != nil {
			return nil, nil, fmt.Errorf("starting the cache of dependencies: %w", err)
		}
		inf, err := c.GetInformer(ctx, &v1alpha1.ManifestSync{}, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, nil, fmt.Errorf("watching dependencies: %w", err)
		}
		if err := w.ctrl.Watch(source.Kind[client.Object](c, &v1alpha1.ManifestSync{},
			handler.EnqueueRequestsFromMapFunc(r.forDependants), readinessChanged())); err != nil {
			return nil, nil, fmt.Errorf("watching dependencies: %w", err)
		}
		mgr.GetLogger().WithName("dependencies").Info("a dependency is another replica's: watching the readiness of every ManifestSync")
		return inf, c, nil
	}}
}

// get reads the ManifestSync ref, which the replica's own cache does not
// hold; nil when there is none.
func (v *dependencyView) get(ctx context.Context, ref engine.SyncRef) (*v1alpha1.ManifestSync, error) {
	v.mu.Lock()
	if v.informer == nil {
		inf, c, err := v.start(ctx)
		if err != nil {
			v.mu.Unlock()
			return nil, err
		}
		v.informer, v.cache = inf, c
	}
	reader := v.direct
	if v.informer.HasSynced() {
		reader = v.cache
	}
	v.mu.Unlock()
	ms := &v1alpha1.ManifestSync{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, ms)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ManifestSync %s: %w", ref, err)
	}
	return ms, nil
}

// dependencyFields is the dependency view's transform: of a ManifestSync
// it keeps what checkDependencies and the watch's predicate read, so that
// every ManifestSync of the cluster costs the view a few hundred bytes,
// and no message of another tenant's ManifestSync is held.
func dependencyFields(obj any) (any, error) {
	ms, ok := obj.(*v1alpha1.ManifestSync)
	if !ok {
		return obj, nil
	}
	out := &v1alpha1.ManifestSync{
		TypeMeta: ms.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ms.Namespace, Name: ms.Name, UID: ms.UID, ResourceVersion: ms.ResourceVersion,
			Generation: ms.Generation, DeletionTimestamp: ms.DeletionTimestamp,
		},
	}
	out.Spec.DependsOn = ms.Spec.DependsOn
	if c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		ready := *c
		ready.Message = ""
		out.Status.Conditions = []metav1.Condition{ready}
	}
	return out, nil
}
