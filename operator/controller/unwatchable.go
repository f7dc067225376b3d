package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// No kind holds a worker. A watch of a kind the operator may not list and
// watch (RBAC: a Pod, a ClusterRoleBinding a transform outputs) never
// syncs, and a cached read of it would wait for it forever. So:
//   - before a kind is watched, the operator lists one object of it (a
//     read: an access review would be a write at every start); a kind the
//     API server refuses to list is read object by object instead (its
//     drift is then found at each resync, not watched), and tried again
//     after accessRecheck (RBAC changes);
//   - a watch whose list or watch the API server refuses (a kind the
//     operator may list but not watch, or RBAC changed) is stopped and its
//     informer removed, rather than left
//     retrying and logging forever, and the kind is read directly;
//   - a cached read waits at most syncWait, from the start of the watch,
//     for the kind's cache to sync, and then reads directly (or, for the
//     managed cache, fails at once with errNotWatched, so that its
//     callers read from the API server as the ManifestSync).
// A direct read the API server refuses fails the object with the API
// server's own message (its 403 names the user and the verb).

const (
	// accessRecheck is how long a refused list+watch is remembered.
	accessRecheck = time.Minute
	// accessReviewTimeout bounds one list of a kind's access check.
	accessReviewTimeout = 5 * time.Second
	// syncWait bounds how long a cached read waits for its kind's cache
	// to sync, counted from the start of the watch.
	syncWait = 5 * time.Second
)

// errNotWatched is the error of a read of the managed cache for a kind it
// does not watch (or whose cache has not synced within syncWait): the
// caller reads from the API server.
var errNotWatched = errors.New("not in the cache of managed objects")

// kindAccess tells whether the operator may list and watch a kind, cluster
// wide ("" namespace) or in a namespace, remembering refusals for
// accessRecheck.
type kindAccess struct {
	reader client.Reader // the operator's own, from the API server

	mu     sync.Mutex
	denied map[accessKey]time.Time // until when
}

type accessKey struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// watchable reports whether the operator may list the objects of kind gvk
// in namespace ("" for all), as a list of one tells. An error is a list
// that failed otherwise: the caller reads directly this time.
func (a *kindAccess) watchable(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (bool, error) {
	key := accessKey{gvk: gvk, namespace: namespace}
	a.mu.Lock()
	until, refused := a.denied[key]
	a.mu.Unlock()
	if refused && time.Now().Before(until) {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, accessReviewTimeout)
	defer cancel()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.Limit(1)}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	switch err := a.reader.List(ctx, list, opts...); {
	case err == nil:
		return true, nil
	case apierrors.IsForbidden(err):
		a.deny(key)
		return false, nil
	default:
		return false, fmt.Errorf("listing %s: %w", gvk.Kind, err)
	}
}

// deny remembers that the operator may not list or watch key's objects.
func (a *kindAccess) deny(key accessKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.denied[key] = time.Now().Add(accessRecheck)
}

// onForbidden makes a cache's informers stop when the API server refuses
// their list or watch: the kind goes back to direct reads (unwatch), and
// the informer is removed instead of retrying forever. next makes the
// informer.
func (w *watches) onForbidden(namespace string, next func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		inf := next(lw, obj, resync, indexers)
		gvk := obj.GetObjectKind().GroupVersionKind()
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *toolscache.Reflector, err error) {
			if apierrors.IsForbidden(err) && !gvk.Empty() {
				go w.unwatch(gvk, namespace, obj)
				return // logged once, by unwatch
			}
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		})
		return inf
	}
}

// unwatch stops the watches of kind gvk in namespace's cache ("" the
// managed cache) of obj's form (metadata or whole), after the API server
// refused them, and removes their informer.
func (w *watches) unwatch(gvk schema.GroupVersionKind, namespace string, obj runtime.Object) {
	_, whole := obj.(*unstructured.Unstructured)
	w.mu.Lock()
	c := w.namespaces[namespace]
	if namespace == "" {
		c = w.managedCache
	}
	removed := false
	for key := range w.started {
		if key.gvk == gvk && key.namespace == namespace && (namespace != "" || (key.purpose == watchHealth) == whole) {
			delete(w.started, key)
			delete(w.since, key)
			delete(w.used, key)
			removed = true
		}
	}
	w.mu.Unlock()
	w.access.deny(accessKey{gvk: gvk, namespace: namespace})
	if w.reader != nil && namespace == "" {
		w.reader.indexers.Delete(gvk)
	}
	if !removed || c == nil {
		return
	}
	probe, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return
	}
	w.log.Info("the API server refused the watch of a kind; its objects are read directly from now on", "kind", gvk.String(), "namespace", namespace)
	if err := c.RemoveInformer(context.Background(), probe); err != nil {
		w.log.Error(err, "removing the informer", "kind", gvk.String())
	}
}

// watching says since when the watch key runs; false when it does not.
func (w *watches) watching(key watchKey) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since, ok := w.since[key]
	return since, ok
}

// watchingIn says since when some watch of kind gvk runs in namespace's
// cache; false when none does.
func (w *watches) watchingIn(gvk schema.GroupVersionKind, namespace string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, since := range w.since {
		if key.gvk == gvk && key.namespace == namespace {
			return since, true
		}
	}
	return time.Time{}, false
}

// awaitSync returns nil once the informer of obj's kind in c has synced,
// or errNotWatched when it has not by since+syncWait.
func awaitSync(ctx context.Context, c cache.Cache, obj client.Object, since time.Time) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("%w: %w", errNotWatched, err)
	}
	if inf.HasSynced() {
		return nil
	}
	wait := time.Until(since.Add(syncWait))
	if wait <= 0 {
		return errNotWatched
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-inf.HasSyncedChecker().Done():
		return nil
	case <-timer.C:
		return errNotWatched
	case <-ctx.Done():
		return ctx.Err()
	}
}

// namespaceCache is the cache of one namespace's objects as sources and
// object sets read it: a kind it does not watch (the operator may not), or
// whose cache did not sync within syncWait, is read from the API server
// (direct) instead, in that namespace.
type namespaceCache struct {
	cache.Cache
	namespace string
	direct    client.Reader
	scheme    *runtime.Scheme
	watching  func(gvk schema.GroupVersionKind, namespace string) (time.Time, bool)
}

func (c *namespaceCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.cached(ctx, obj, false) {
		return c.Cache.Get(ctx, key, obj, opts...)
	}
	return c.direct.Get(ctx, key, obj, opts...)
}

func (c *namespaceCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if c.cached(ctx, list, true) {
		return c.Cache.List(ctx, list, opts...)
	}
	return c.direct.List(ctx, list, append(opts, client.InNamespace(c.namespace))...)
}

// cached reports whether obj's kind (of a list, when isList) is watched
// and synced, after waiting for it to sync at most until syncWait.
func (c *namespaceCache) cached(ctx context.Context, obj runtime.Object, isList bool) bool {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return false
	}
	if isList {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	since, ok := c.watching(gvk, c.namespace)
	if !ok {
		return false
	}
	// The namespace caches hold metadata.
	return awaitSync(ctx, c.Cache, metadataProbe(gvk), since) == nil
}

// metadataProbe is an empty object of kind gvk, as metadata caches hold it.
func metadataProbe(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	return m
}
