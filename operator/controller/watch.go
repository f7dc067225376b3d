package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Field indexes of ManifestSyncs in the manager's cache.
const (
	// indexSources holds each object source as "group/Kind/namespace/name".
	indexSources = "manifestsync.dev/object-sources"
	// indexNamespaces holds each in-cluster target namespace, and
	// anyNamespace for a namespaceSelector target.
	indexNamespaces = "manifestsync.dev/target-namespaces"
	anyNamespace    = "*"
)

// SetupWithManager registers the reconciler with mgr: the ManifestSync
// controller, its indexes and watches, and a cache of the objects it
// manages (only those carrying OwnerLabel; their metadata, and whole
// objects of the kinds whose health needs their status).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	return r.SetupWithManagerWrapped(ctx, mgr, nil)
}

// SetupWithManagerWrapped is SetupWithManager with the controller
// reconciling through wrap(r) (when not nil): the filter of a shard
// replica (operator/shard.Replica.Wrap), which reconciles only the
// ManifestSyncs of its share, within its fence.
func (r *Reconciler) SetupWithManagerWrapped(ctx context.Context, mgr ctrl.Manager, wrap func(reconcile.Reconciler) reconcile.Reconciler) error {
	if err := ValidateInstanceID(r.Options.InstanceID); err != nil {
		return err
	}
	RegisterMetrics()
	r.guard = r.Options.writeGuard()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Mapper == nil {
		r.Mapper = mgr.GetRESTMapper()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(r.Options.fieldManager())
	}
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &v1alpha1.ManifestSync{}, indexSources, func(o client.Object) []string {
		return sourceIndexKeys(o.(*v1alpha1.ManifestSync))
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1alpha1.ManifestSync{}, indexNamespaces, func(o client.Object) []string {
		return targetNamespaceKeys(o.(*v1alpha1.ManifestSync))
	}); err != nil {
		return err
	}
	if err := r.setupObjectSets(ctx, mgr); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1alpha1.ManifestSync{}, indexDependsOn, func(o client.Object) []string {
		return dependsOnKeys(o.(*v1alpha1.ManifestSync))
	}); err != nil {
		return err
	}

	managedSelector, err := managedObjectsSelector(r.Options.ShardID)
	if err != nil {
		return err
	}
	w := &watches{
		mapper:     mgr.GetRESTMapper(),
		forSource:  r.forSource,
		forOwner:   r.Options.ownerRequests,
		access:     &kindAccess{reader: mgr.GetAPIReader(), denied: map[accessKey]time.Time{}},
		log:        mgr.GetLogger().WithName("watches"),
		started:    map[watchKey]bool{},
		since:      map[watchKey]time.Time{},
		used:       map[watchKey]time.Time{},
		namespaces: map[string]cache.Cache{},
	}
	managed, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: managedSelector,
		// Our own managed fields entry stays: drift is judged by it.
		DefaultTransform: keepOwnFields(r.Options.fieldManager()),
		NewInformer:      w.onForbidden("", withoutNamespaceIndex(r.Options.APIServer.NewInformer)),
		// A read of a kind not watched never starts a watch (which, for a
		// kind the operator may not list, would never sync).
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return fmt.Errorf("creating the cache of managed objects: %w", err)
	}
	if err := mgr.Add(cacheRunnable{managed}); err != nil {
		return err
	}
	w.managedCache = managed
	w.reader = &managedCache{Cache: managed, scheme: mgr.GetScheme(), watching: w.watching}
	r.managed = w.reader

	rateLimiter := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
		orDefault(r.Options.RetryMin, time.Second), orDefault(r.Options.RetryMax, 5*time.Minute))
	c, err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ManifestSync{}, builder.WithPredicates(specOrMetadataChanged())).
		Watches(&v1alpha1.ManifestSync{}, handler.EnqueueRequestsFromMapFunc(r.forDependants), builder.WithPredicates(readinessChanged())).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.forNamespaceOrAllowFrom),
			builder.WithPredicates(predicate.Or[client.Object](predicate.LabelChangedPredicate{}, allowFromChanged()))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.concurrency(), RateLimiter: rateLimiter}).
		Named("manifestsync").
		Build(wrapped(r, wrap))
	if err != nil {
		return err
	}
	w.ctrl = c
	r.setupDependencyView(mgr, w)
	w.newCache = func(namespace string) (cache.Cache, error) {
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			HTTPClient:        mgr.GetHTTPClient(),
			Scheme:            mgr.GetScheme(),
			Mapper:            mgr.GetRESTMapper(),
			DefaultNamespaces: map[string]cache.Config{namespace: {}},
			DefaultTransform:  cache.TransformStripManagedFields(),
			NewInformer:       w.onForbidden(namespace, r.Options.APIServer.NewInformer),
		})
		if err != nil {
			return nil, fmt.Errorf("creating the cache of namespace %q: %w", namespace, err)
		}
		// Started at once when the manager runs already.
		return &namespaceCache{Cache: c, namespace: namespace, direct: r.APIReader, scheme: mgr.GetScheme(), watching: w.watchingIn},
			mgr.Add(cacheRunnable{c})
	}
	r.watches = w
	if err := mgr.Add(r.watchSweeper()); err != nil {
		return err
	}
	return r.setupClusters(ctx, mgr)
}

// managedObjectsSelector selects the objects of the managed cache: those
// carrying OwnerLabel and, for a replica of --shards auto (shard is its
// ID), its own ShardLabel, so that each replica holds only its share.
func managedObjectsSelector(shard string) (labels.Selector, error) {
	owned, err := labels.NewRequirement(OwnerLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	sel := labels.NewSelector().Add(*owned)
	if shard == "" {
		return sel, nil
	}
	mine, err := labels.NewRequirement(ShardLabel, selection.Equals, []string{shard})
	if err != nil {
		return nil, fmt.Errorf("shard id %q: %w", shard, err)
	}
	return sel.Add(*mine), nil
}

func wrapped(r reconcile.Reconciler, wrap func(reconcile.Reconciler) reconcile.Reconciler) reconcile.Reconciler {
	if wrap == nil {
		return r
	}
	return wrap(r)
}

// cacheRunnable makes the manager start a cache with its own, before the
// controllers.
type cacheRunnable struct{ cache.Cache }

func (c cacheRunnable) GetCache() cache.Cache { return c.Cache }

// specOrMetadataChanged passes ManifestSync events except those of its own
// status writes.
func specOrMetadataChanged() predicate.Predicate {
	return predicate.Or[client.Object](
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return !e.ObjectNew.GetDeletionTimestamp().Equal(e.ObjectOld.GetDeletionTimestamp()) ||
				len(e.ObjectNew.GetFinalizers()) != len(e.ObjectOld.GetFinalizers())
		}},
	)
}

// targetNamespaceKeys are the index keys of ms's in-cluster targets.
func targetNamespaceKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, t := range ms.Spec.Targets {
		switch {
		case t.Cluster != nil:
		case t.NamespaceSelector != nil:
			keys = append(keys, anyNamespace)
		case t.Namespace != "":
			keys = append(keys, t.Namespace)
		}
	}
	return keys
}

// forNamespace maps a namespace to the ManifestSyncs that target it by
// name or may select it, as a target or as a namespace of an object set.
func (r *Reconciler) forNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, key := range []string{ns.GetName(), anyNamespace} {
		reqs = append(reqs, r.listBy(ctx, indexNamespaces, key)...)
	}
	reqs = append(reqs, r.listBy(ctx, indexObjectSets, setsOfAnyNamespace)...)
	return reqs
}

// forSource maps an object of kind gvk to the ManifestSyncs that read it.
func (r *Reconciler) forSource(gvk schema.GroupVersionKind) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		ref := objectRef{gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()}
		return r.listBy(ctx, indexSources, ref.indexKey())
	}
}

func (r *Reconciler) listBy(ctx context.Context, index, key string) []reconcile.Request {
	var list v1alpha1.ManifestSyncList
	// Only names are read: the cache's objects are not copied (a fan-out's
	// status is a thousand rows and its inventory).
	if err := r.Client.List(ctx, &list, client.MatchingFields{index: key}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing ManifestSyncs", "index", index)
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i, ms := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ms.Namespace, Name: ms.Name}}
	}
	return reqs
}

// withoutNamespaceIndex makes informers as newInformer does, without the
// index by namespace: the managed cache is read by key only, and with a
// fan-out the index holds a key per copy (a tenth of what the cache
// keeps of it). Listing it by namespace fails, saying the index is not
// there.
func withoutNamespaceIndex(newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		indexers = maps.Clone(indexers)
		delete(indexers, toolscache.NamespaceIndex)
		return newInformer(lw, obj, resync, indexers)
	}
}

// watches starts, once per kind and on first use, the metadata-only
// watches the controller needs beyond its static ones: the kinds of object
// sources and of kubeconfig Secrets, in the namespaces they live in (a
// cache per namespace), and the kinds of managed objects (in the
// owner-labelled cache), whole for the kinds whose health needs their
// status. Nothing is watched cluster-wide for a source: the operator
// holds the metadata of the namespaces that hold sources, not that of
// every Secret of the cluster.
type watches struct {
	ctrl         controller.Controller
	managedCache cache.Cache
	reader       *managedCache // managedCache, as the reconciler reads it
	mapper       apimeta.RESTMapper
	forSource    func(schema.GroupVersionKind) handler.MapFunc
	forOwner     handler.MapFunc // the ManifestSync of one of our objects
	// newCache makes and starts the cache of one namespace's objects.
	newCache func(namespace string) (cache.Cache, error)
	// access tells the kinds the operator may list and watch (see
	// unwatchable.go).
	access *kindAccess
	log    logr.Logger

	mu         sync.Mutex
	started    map[watchKey]bool
	since      map[watchKey]time.Time // when each started
	used       map[watchKey]time.Time // when inNamespace last returned each (watchsweep.go)
	namespaces map[string]cache.Cache // by namespace, made by newCache
}

// watchKey is one watch: of a kind of managed objects, or of a kind in a
// namespace, for a purpose.
type watchKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	purpose   watchPurpose
}

type watchPurpose int

const (
	watchSources watchPurpose = iota
	watchKubeConfigs
	watchManaged
	watchHealth
	watchObjectSets
)

// source watches the objects of kind gvk in namespace, for object
// sources, and returns the cache of their metadata.
func (w *watches) source(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (client.Reader, error) {
	return w.inNamespace(watchKey{gvk: gvk, namespace: namespace, purpose: watchSources}, handler.EnqueueRequestsFromMapFunc(w.forSource(gvk)))
}

// kubeConfigs watches the Secrets of namespace, for the kubeconfigs of
// remote targets: h maps a changed one to the ManifestSyncs that use it.
// It returns the cache of their metadata.
func (w *watches) kubeConfigs(namespace string, h handler.MapFunc) (client.Reader, error) {
	key := watchKey{gvk: corev1.SchemeGroupVersion.WithKind("Secret"), namespace: namespace, purpose: watchKubeConfigs}
	return w.inNamespace(key, handler.EnqueueRequestsFromMapFunc(h), predicate.ResourceVersionChangedPredicate{})
}

// managed watches the metadata of our objects of kind gvk, for drift.
// A kind the operator may not list and watch is not watched: its objects
// are read from the API server.
func (w *watches) managed(ctx context.Context, gvk schema.GroupVersionKind) error {
	return notWatchableIsNil(w.start(watchKey{gvk: gvk, purpose: watchManaged}, w.managedCache, handler.EnqueueRequestsFromMapFunc(w.forOwner)))
}

// notWatchableIsNil is err, but nil for errNotWatchable: the kind is read
// directly.
func notWatchableIsNil(err error) error {
	if errors.Is(err, errNotWatchable) {
		return nil
	}
	return err
}

// health watches our objects of kind gvk whole, for their health: the
// cache holds them, and a change of their status or generation wakes
// their ManifestSync. Only the kinds whose health needs more than their
// metadata are watched so (see health.Checker.NeedsObject).
func (w *watches) health(ctx context.Context, gvk schema.GroupVersionKind) error {
	return notWatchableIsNil(w.start(watchKey{gvk: gvk, purpose: watchHealth}, w.managedCache, handler.EnqueueRequestsFromMapFunc(w.forOwner), healthChanged()))
}

// healthChanged passes the events that may change an object's health:
// creations, deletions, and updates of its status, generation or
// deletion.
func healthChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*unstructured.Unstructured)
		after, ok2 := e.ObjectNew.(*unstructured.Unstructured)
		if !ok1 || !ok2 {
			return true
		}
		return before.GetGeneration() != after.GetGeneration() ||
			!before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) ||
			!equality.Semantic.DeepEqual(before.Object["status"], after.Object["status"])
	}}
}

// inNamespace starts the watch key of a kind in its namespace's cache,
// made on first use, and returns that cache. A kind the operator may not
// list and watch there is not watched: the cache reads it from the API
// server (see namespaceCache).
func (w *watches) inNamespace(key watchKey, h handler.EventHandler, preds ...predicate.Predicate) (client.Reader, error) {
	w.mu.Lock()
	c := w.namespaces[key.namespace]
	if c == nil {
		var err error
		if c, err = w.newCache(key.namespace); err != nil {
			w.mu.Unlock()
			return nil, err
		}
		w.namespaces[key.namespace] = c
	}
	w.used[key] = time.Now()
	w.mu.Unlock()
	return c, notWatchableIsNil(w.start(key, c, h, preds...))
}

// errNotWatchable is start's error for a kind the operator may not list
// and watch (or could not find out whether it may).
var errNotWatchable = errors.New("the operator may not list and watch the kind")

func (w *watches) start(key watchKey, c cache.Cache, h handler.EventHandler, preds ...predicate.Predicate) error {
	if _, ok := w.watching(key); ok {
		return nil
	}
	// An unknown kind would make the watch retry forever; fail instead.
	if _, err := w.mapper.RESTMapping(key.gvk.GroupKind(), key.gvk.Version); err != nil {
		return err
	}
	// So would a kind the operator may not list and watch.
	if ok, err := w.access.watchable(context.Background(), key.gvk, key.namespace); !ok {
		if err != nil {
			w.log.V(1).Info("reading a kind directly: could not tell whether the operator may watch it", "kind", key.gvk.String(), "error", err.Error())
		}
		return errNotWatchable
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started[key] {
		return nil
	}
	var obj client.Object
	if key.purpose == watchHealth {
		obj = &unstructured.Unstructured{}
	} else {
		obj = &metav1.PartialObjectMetadata{}
	}
	obj.GetObjectKind().SetGroupVersionKind(key.gvk)
	if nc, ok := c.(*namespaceCache); ok {
		c = nc.Cache // the source's events come from the informer itself
	}
	if err := w.ctrl.Watch(source.Kind[client.Object](c, obj, h, preds...)); err != nil {
		return err
	}
	w.started[key], w.since[key] = true, time.Now()
	return nil
}
