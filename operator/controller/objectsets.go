package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	enginesource "github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/plural"
)

// indexObjectSets holds, for each object set source of a ManifestSync,
// "group/Kind/namespace" per kind it reads ("group/Kind/*" with a
// namespaceSelector, "*/namespace" for the whole namespace), and
// setsOfAnyNamespace when a namespaceSelector makes it follow namespaces.
const (
	indexObjectSets    = "manifestsync.dev/object-sets"
	setsOfAnyNamespace = "namespaces"
)

// objectSets holds what object sets need beyond the namespace caches:
// discovery, for the whole-namespace form, and a metadata cache per
// namespace and label selector, so that a set of 20 labelled Secrets
// among 10,000 costs the metadata of 20. Their watches go as the
// namespace caches' do (unwatchable.go): a kind the operator may not list
// there is not watched but read directly (the API server's 403 fails the
// source at once), and a watch the API server refuses later is removed,
// not left retrying.
type objectSets struct {
	kinds discovery.CachedDiscoveryInterface
	// newCache makes and starts the cache of a namespace and selector,
	// its informers made as wrap makes them of the operator's.
	newCache func(namespace string, sel labels.Selector, wrap func(informerFunc) informerFunc) (*namespaceCache, error)
	log      logr.Logger

	mu     sync.Mutex
	caches map[setCacheKey]*namespaceCache
	since  map[setWatchKey]time.Time // when each watch started
	used   map[setWatchKey]time.Time // when watch last returned each (watchsweep.go)
}

// informerFunc makes a cache's informers (cache.Options.NewInformer).
type informerFunc = func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer

type setCacheKey struct{ namespace, selector string }

type setWatchKey struct {
	setCacheKey
	gvk schema.GroupVersionKind
}

// setupObjectSets registers the index the watches of object sets map
// their events through, and makes their discovery and caches.
func (r *Reconciler) setupObjectSets(ctx context.Context, mgr ctrl.Manager) error {
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	r.sets = &objectSets{
		kinds: memory.NewMemCacheClient(dc),
		newCache: func(namespace string, sel labels.Selector, wrap func(informerFunc) informerFunc) (*namespaceCache, error) {
			c, err := cache.New(mgr.GetConfig(), cache.Options{
				HTTPClient:           mgr.GetHTTPClient(),
				Scheme:               mgr.GetScheme(),
				Mapper:               mgr.GetRESTMapper(),
				DefaultNamespaces:    map[string]cache.Config{namespace: {}},
				DefaultLabelSelector: sel,
				DefaultTransform:     cache.TransformStripManagedFields(),
				NewInformer:          wrap(r.Options.APIServer.NewInformer),
				// A read of a kind not watched never starts a watch.
				ReaderFailOnMissingInformer: true,
			})
			if err != nil {
				// The caller says which namespace, if the tenant may know it.
				return nil, fmt.Errorf("creating the cache of objects %s: %w", sel, err)
			}
			nc := &namespaceCache{Cache: c, namespace: namespace, direct: mgr.GetAPIReader(), scheme: mgr.GetScheme(),
				watching: func(gvk schema.GroupVersionKind, _ string) (time.Time, bool) {
					return r.sets.watching(setWatchKey{setCacheKey: setCacheKey{namespace: namespace, selector: sel.String()}, gvk: gvk})
				}}
			return nc, mgr.Add(cacheRunnable{c})
		},
		log:    mgr.GetLogger().WithName("object-sets"),
		caches: map[setCacheKey]*namespaceCache{},
		since:  map[setWatchKey]time.Time{},
		used:   map[setWatchKey]time.Time{},
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ManifestSync{}, indexObjectSets, func(o client.Object) []string {
		return objectSetIndexKeys(o.(*v1alpha1.ManifestSync))
	})
}

// objectSetIndexKeys are the index keys of every object set source of ms.
func objectSetIndexKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, s := range ms.Spec.Sources {
		if s.Objects == nil || s.Cluster != nil { // a remote one's events come from its cluster
			continue
		}
		set, err := engine.CompileObjectSet(s.Objects, ms.Namespace)
		if err != nil {
			continue
		}
		ns := set.Namespace
		if set.NamespaceSelector != nil {
			ns = anyNamespace
			keys = append(keys, setsOfAnyNamespace)
		}
		if set.WholeNamespace() {
			keys = append(keys, "*/"+ns)
		}
		for _, gvk := range set.Kinds {
			keys = append(keys, setIndexKey(gvk, ns))
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func setIndexKey(gvk schema.GroupVersionKind, namespace string) string {
	return gvk.Group + "/" + gvk.Kind + "/" + namespace
}

// forObjectSet maps an object of kind gvk to the ManifestSyncs whose
// object sets may hold it. Whether they do is for their reconcile to say:
// it costs a list of the metadata cache.
func (r *Reconciler) forObjectSet(gvk schema.GroupVersionKind) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		for _, key := range []string{setIndexKey(gvk, obj.GetNamespace()), setIndexKey(gvk, anyNamespace), "*/" + obj.GetNamespace()} {
			reqs = append(reqs, r.listBy(ctx, indexObjectSets, key)...)
		}
		return reqs
	}
}

// setReader watches the metadata of the objects of kind gvk in namespace
// that sel matches, for object sets, and returns the reader of it: the
// cache once it has synced (a set is decided on a list, which a cache
// still starting would get wrong), waiting for it at most syncWait from
// the start of the watch, else the API server. A selector that matches
// everything shares the namespace's cache with object sources; any other
// has a cache of its own, which holds only what it matches. A kind the
// operator may not list is read from the API server, whose 403 fails the
// source at once.
func (r *Reconciler) setReader(ctx context.Context, gvk schema.GroupVersionKind, namespace string, sel labels.Selector) (client.Reader, error) {
	h := handler.EnqueueRequestsFromMapFunc(r.forObjectSet(gvk))
	if sel.Empty() {
		return r.watches.inNamespace(watchKey{gvk: gvk, namespace: namespace, purpose: watchObjectSets}, h)
	}
	return r.sets.watch(ctx, r.watches, setCacheKey{namespace: namespace, selector: sel.String()}, sel, gvk, h)
}

// watch starts, once, the watch of kind gvk in the cache of key, made on
// first use, and returns that cache; a kind the operator may not list in
// key's namespace is not watched (the cache reads it directly).
func (s *objectSets) watch(ctx context.Context, w *watches, key setCacheKey, sel labels.Selector, gvk schema.GroupVersionKind, h handler.EventHandler) (*namespaceCache, error) {
	c, err := s.cacheOf(w.access, key, sel)
	if err != nil {
		return nil, err
	}
	wk := setWatchKey{setCacheKey: key, gvk: gvk}
	s.mu.Lock()
	s.used[wk] = time.Now()
	s.mu.Unlock()
	if _, ok := s.watching(wk); ok {
		return c, nil
	}
	// An unknown kind would make the watch retry forever; fail instead.
	if _, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return nil, err
	}
	// So would a kind the operator may not list there: read it directly.
	if ok, err := w.access.watchable(ctx, gvk, key.namespace); !ok {
		if err != nil {
			s.log.V(1).Info("reading a kind directly: could not tell whether the operator may watch it", "kind", gvk.String(), "error", err.Error())
		}
		return c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.since[wk]; ok {
		return c, nil
	}
	if err := w.ctrl.Watch(source.Kind[client.Object](c.Cache, metadataProbe(gvk), h)); err != nil {
		return nil, err
	}
	s.since[wk] = time.Now()
	return c, nil
}

// cacheOf is the cache of key, made on first use; its informers stop when
// the API server refuses them (onForbidden).
func (s *objectSets) cacheOf(access *kindAccess, key setCacheKey, sel labels.Selector) (*namespaceCache, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.caches[key]; c != nil {
		return c, nil
	}
	c, err := s.newCache(key.namespace, sel, func(next informerFunc) informerFunc { return s.onForbidden(access, key, next) })
	if err != nil {
		return nil, err
	}
	s.caches[key] = c
	return c, nil
}

// watching says since when the watch wk runs; false when it does not.
func (s *objectSets) watching(wk setWatchKey) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, ok := s.since[wk]
	return since, ok
}

// onForbidden makes the informers of key's cache, by next, stop when the
// API server refuses their list or watch (RBAC changed since the access
// check): the kind is read directly from then on, and not watched again
// before accessRecheck.
func (s *objectSets) onForbidden(access *kindAccess, key setCacheKey, next informerFunc) informerFunc {
	return func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		inf := next(lw, obj, resync, indexers)
		gvk := obj.GetObjectKind().GroupVersionKind()
		_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *toolscache.Reflector, err error) {
			if !apierrors.IsForbidden(err) || gvk.Empty() {
				toolscache.DefaultWatchErrorHandler(ctx, r, err)
				return
			}
			go s.unwatch(access, setWatchKey{setCacheKey: key, gvk: gvk})
		})
		return inf
	}
}

// unwatch removes the informer of wk after the API server refused it.
func (s *objectSets) unwatch(access *kindAccess, wk setWatchKey) {
	s.mu.Lock()
	_, was := s.since[wk]
	delete(s.since, wk)
	delete(s.used, wk)
	c := s.caches[wk.setCacheKey]
	s.mu.Unlock()
	access.deny(accessKey{gvk: wk.gvk, namespace: wk.namespace})
	if !was || c == nil {
		return
	}
	// The selector is the set's own; the namespace is logged, not said to a tenant.
	s.log.Info("the API server refused the watch of a kind for object sets; its objects are read directly from now on",
		"kind", wk.gvk.String(), "namespace", wk.namespace, "selector", wk.selector)
	if err := c.RemoveInformer(context.Background(), metadataProbe(wk.gvk)); err != nil {
		s.log.Error(err, "removing the informer", "kind", wk.gvk.String())
	}
}

// objectSetSource reads the objects of an object set. What the set holds is
// decided on the metadata cache (labels, names, annotations); a body is
// read from the API server, as the ManifestSync's service account, only
// when the object is new to the set or its resourceVersion changed. Every
// object of another namespace must share itself with the ManifestSync's
// namespace (AllowNamespacesAnnotation), or the source fails, saying how
// many did not (see notSharedError): never which, for the tenant may not
// list them.
func objectSetSource(ctx context.Context, ms *v1alpha1.ManifestSync, sc *sourceCluster, name string, set *engine.ObjectSet, st *syncState) ([]map[string]any, error) {
	namespaces, err := setNamespaces(ctx, sc, set)
	if err != nil {
		return nil, err
	}
	kinds := set.Kinds
	if set.WholeNamespace() {
		if kinds, err = sc.kinds(); err != nil {
			return nil, err
		}
	}
	reader, err := sc.bodies(ms)
	if err != nil {
		return nil, err
	}
	var objs []map[string]any
	read := map[objectRef]bool{}
	denied := 0
	for _, ns := range namespaces {
		for _, gvk := range kinds {
			got, notShared, err := readSetKind(ctx, ms, sc, set, reader, gvk, ns, st)
			if err != nil {
				return nil, err
			}
			denied += notShared
			for _, g := range got {
				read[g.ref] = true
				objs = append(objs, g.obj)
			}
		}
	}
	if denied > 0 {
		return nil, notSharedError(ms, set, denied)
	}
	forgetSetBodies(ms, name, read, st)
	return objs, nil
}

// setObject is an object read for a set.
type setObject struct {
	ref objectRef
	obj map[string]any
}

// readSetKind reads the objects of kind gvk in namespace that set holds,
// and counts those it selects that are not shared with ms (unread).
func readSetKind(ctx context.Context, ms *v1alpha1.ManifestSync, sc *sourceCluster, set *engine.ObjectSet, reader client.Reader, gvk schema.GroupVersionKind, ns string, st *syncState) (out []setObject, denied int, err error) {
	where := setNamespaceOf(set, ns)
	cached, err := sc.set(ctx, gvk, ns, set.Labels)
	if err != nil {
		return nil, 0, fmt.Errorf("%s in %s: watching: %w", gvk.Kind, where, unnamed(ctx, set, ns, err))
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := cached.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: set.Labels}); err != nil {
		return nil, 0, fmt.Errorf("listing %s in %s: %w", gvk.Kind, where, unnamed(ctx, set, ns, err))
	}
	for i := range list.Items {
		meta := &list.Items[i]
		if !set.Selects(gvk, meta) {
			continue
		}
		ref := objectRef{gvk: gvk, namespace: ns, name: meta.Name, cluster: sc.ref}
		if sc.allowed(ms, ref, meta.Annotations) != nil {
			denied++ // never named: see notSharedError
			continue
		}
		snap := st.sources[ref]
		if snap == nil || snap.Revision != "resourceVersion:"+meta.ResourceVersion {
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: meta.Name}, obj); err != nil {
				if apierrors.IsNotFound(err) {
					continue // gone since the cache listed it; its delete event follows
				}
				// It shares itself with ms's namespace: it may be named.
				return nil, 0, fmt.Errorf("%s: %w", ref, err)
			}
			// The body decides, should the cache lag behind it.
			if !set.Selects(gvk, obj) {
				continue
			}
			if sc.allowed(ms, ref, obj.GetAnnotations()) != nil {
				denied++
				continue
			}
			unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
			snap = enginesource.ObjectSnapshot(obj.Object)
			st.sources[ref] = snap
		}
		if set.SelectsBody(snap.Object) {
			out = append(out, setObject{ref: ref, obj: snap.Object})
		}
	}
	return out, denied, nil
}

// setNamespaceOf words namespace ns of set in an error: by name when the
// tenant named it (spec.sources[].objects.namespace), else not at all, for
// a namespaceSelector picks among namespaces the tenant may not list.
func setNamespaceOf(set *engine.ObjectSet, ns string) string {
	if set.NamespaceSelector != nil {
		return "a namespace its namespaceSelector selects"
	}
	return fmt.Sprintf("namespace %q", ns)
}

// unnamed is err of reading namespace ns for set, as its tenant may read
// it: whole when the tenant named ns, else (a namespace its
// namespaceSelector picked) with ns said as <namespace>; the operator's
// log has it whole. An API server's refusal of the operator's own watch,
// for one, names the namespace.
func unnamed(ctx context.Context, set *engine.ObjectSet, ns string, err error) error {
	if set.NamespaceSelector == nil {
		return err
	}
	msg := err.Error()
	hidden := namespaceWord(ns).ReplaceAllString(msg, "${1}<namespace>${2}")
	if hidden == msg {
		return err
	}
	log.FromContext(ctx).Error(err, "object set: reading a namespace its namespaceSelector selects", "namespace", ns)
	return errors.New(hidden)
}

// namespaceWord matches the namespace ns as a word of a message: not
// inside a longer name ("web" is not a word of "webhook").
func namespaceWord(ns string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^a-z0-9.-])` + regexp.QuoteMeta(ns) + `($|[^a-z0-9.-])`)
}

// notSharedError is the error of an object set that selects denied
// objects of other namespaces that do not share themselves with ms's
// namespace. It says only what the tenant knows already or may: that
// access was refused, how many objects, its own selection, and the
// annotation their owners would set. The objects' names, and the
// namespaces a namespaceSelector picked, are not said: the tenant may not
// list them, and an error in its status must not list them for it.
func notSharedError(ms *v1alpha1.ManifestSync, set *engine.ObjectSet, denied int) error {
	where := "namespaces its namespaceSelector selects"
	if set.NamespaceSelector == nil {
		where = fmt.Sprintf("namespace %q", set.Namespace)
	}
	verb := "are"
	if denied == 1 {
		verb = "is"
	}
	return fmt.Errorf("access refused: the object set selects %s in %s that %s not shared with namespace %q: "+
		"an owner shares an object by listing %q (or \"*\") in its annotation %s",
		plural.Count(denied, "object"), where, verb, ms.Namespace, ms.Namespace, AllowNamespacesAnnotation)
}

// forgetSetBodies records what the object set source name read, and drops
// the bodies of the objects it read before and no longer holds, unless
// another source of ms reads them.
func forgetSetBodies(ms *v1alpha1.ManifestSync, name string, read map[objectRef]bool, st *syncState) {
	if st.sets == nil {
		st.sets = map[string]map[objectRef]bool{}
	}
	before := maps.Clone(st.sets[name])
	st.sets[name] = read
	for other, refs := range st.sets {
		if !slices.ContainsFunc(ms.Spec.Sources, func(s v1alpha1.Source) bool { return s.Name == other && s.Objects != nil }) {
			delete(st.sets, other) // a source gone from the spec: what it read may go too
			if before == nil {
				before = map[objectRef]bool{}
			}
			maps.Copy(before, refs)
		}
	}
	keep := map[string]bool{}
	for _, k := range sourceIndexKeys(ms) {
		keep[k] = true
	}
	held := func(ref objectRef) bool {
		for _, m := range st.sets {
			if m[ref] {
				return true
			}
		}
		return keep[ref.indexKey()]
	}
	for ref := range before {
		if !held(ref) {
			delete(st.sources, ref)
		}
	}
}

// setNamespaces are the namespaces set reads: its one namespace, or those
// of the cluster its namespaceSelector picks (from the metadata cache).
func setNamespaces(ctx context.Context, sc *sourceCluster, set *engine.ObjectSet) ([]string, error) {
	if set.NamespaceSelector == nil {
		return []string{set.Namespace}, nil
	}
	all, err := sc.namespaces(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range all {
		if set.SelectsNamespace(ns.Name, ns.Labels) {
			out = append(out, ns.Name)
		}
	}
	return out, nil
}

// namespacedKinds are the kinds the whole-namespace form reads, by
// discovery (cached for the operator's life: a kind served later is read
// after a restart): the
// preferred version of every namespaced kind that can be listed and
// watched, but those WholeNamespaceKind leaves out.
func namespacedKinds(kinds discovery.CachedDiscoveryInterface) ([]schema.GroupVersionKind, error) {
	lists, err := discovery.ServerPreferredNamespacedResources(kinds)
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []schema.GroupVersionKind
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, res := range l.APIResources {
			if strings.Contains(res.Name, "/") || !slices.Contains(res.Verbs, "list") || !slices.Contains(res.Verbs, "watch") {
				continue
			}
			gvk := gv.WithKind(res.Kind)
			if engine.WholeNamespaceKind(gvk.GroupKind()) {
				out = append(out, gvk)
			}
		}
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}
