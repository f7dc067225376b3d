package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// indexClusterSources indexes ManifestSyncs by the remote clusters whose
// watches they need, "namespace/secret/key" of the kubeconfig: those
// their sources read, and those of their namespaceSelector targets.
const indexClusterSources = "manifestsync.dev/cluster-sources"

// sourceCluster is the cluster an object or object set source reads, and
// how: this one (the operator's caches; bodies as the ManifestSync's
// service account; objects of other namespaces only when they share
// themselves) or a remote one (caches of its own, started on first use,
// and its kubeconfig's credentials, which alone authorise the reads: the
// allow-list annotation governs this cluster only).
type sourceCluster struct {
	// ref is "" for this cluster, else "<secret>/<key>", as the inventory
	// names clusters: it keeps the bodies read from two clusters apart.
	ref string
	// object and set return the synced metadata cache of the objects of
	// kind gvk in namespace, for an object source, or for an object set
	// (holding at least what sel matches).
	object func(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (client.Reader, error)
	set    func(ctx context.Context, gvk schema.GroupVersionKind, namespace string, sel labels.Selector) (client.Reader, error)
	// bodies reads objects whole, for ms.
	bodies func(ms *v1alpha1.ManifestSync) (client.Reader, error)
	// namespaces lists the cluster's namespaces, for namespaceSelectors.
	namespaces func(ctx context.Context) ([]engine.Namespace, error)
	// kinds are the kinds the whole-namespace form reads.
	kinds func() ([]schema.GroupVersionKind, error)
	// fail names the cluster in an error of a remote one.
	fail func(err error) error
}

// allowed reports whether ms may read the object ref, whose annotations
// are given: in this cluster see allowed; a remote cluster's credentials
// decide alone.
func (c *sourceCluster) allowed(ms *v1alpha1.ManifestSync, ref objectRef, annotations map[string]string) error {
	if c.ref != "" {
		return nil
	}
	return allowed(ms, ref, annotations)
}

// sourceClusterOf is the cluster src reads.
func (r *Reconciler) sourceClusterOf(ctx context.Context, ms *v1alpha1.ManifestSync, src *v1alpha1.Source) (*sourceCluster, error) {
	if src.Cluster == nil {
		return r.localSources(), nil
	}
	rs, err := r.remoteWatches(ctx, ms, src.Cluster)
	if err != nil {
		return nil, err
	}
	return rs.cluster(), nil
}

// remoteWatches are the watches of the remote cluster c of ms, started on
// first use.
func (r *Reconciler) remoteWatches(ctx context.Context, ms *v1alpha1.ManifestSync, c *v1alpha1.ClusterRef) (*remoteSources, error) {
	ref := kubeConfigRefOf(ms, c)
	reader, err := r.reader(ms)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.name, err)
	}
	rc, err := r.remotes.get(ctx, ref, reader)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.name, err)
	}
	rs, err := r.remotes.sourcesOf(ref, rc)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.name, err)
	}
	return rs, nil
}

// localSources is this cluster, as sources read it.
func (r *Reconciler) localSources() *sourceCluster {
	return &sourceCluster{
		object:     r.watches.source,
		set:        r.setReader,
		bodies:     r.reader,
		namespaces: func(ctx context.Context) ([]engine.Namespace, error) { return Namespaces(ctx, r.Client) },
		kinds: func() ([]schema.GroupVersionKind, error) {
			if r.sets == nil {
				return nil, fmt.Errorf("discovery is not wired")
			}
			return namespacedKinds(r.sets.kinds)
		},
		fail: func(err error) error { return err },
	}
}

// kubeConfigRefOf is the kubeconfig of a cluster of ms.
func kubeConfigRefOf(ms *v1alpha1.ManifestSync, c *v1alpha1.ClusterRef) kubeConfigRef {
	return secretKubeConfig(ms, c.KubeConfigSecretRef)
}

// secretKubeConfig is the kubeconfig a Secret key of ms's namespace holds.
func secretKubeConfig(ms *v1alpha1.ManifestSync, ref v1alpha1.SecretKeyReference) kubeConfigRef {
	key := ref.Key
	if key == "" {
		key = defaultKubeConfigKey
	}
	return kubeConfigRef{namespace: ms.Namespace, name: ref.Name, key: key}
}

func (k kubeConfigRef) String() string { return k.namespace + "/" + k.name + "/" + k.key }

// clusterSourceKeys are the index keys of the remote clusters ms's
// sources read, or whose namespaces its targets select.
func clusterSourceKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, s := range ms.Spec.Sources {
		if s.Cluster != nil {
			keys = append(keys, kubeConfigRefOf(ms, s.Cluster).String())
		}
	}
	for _, t := range ms.Spec.Targets {
		if t.Cluster != nil && t.NamespaceSelector != nil {
			keys = append(keys, kubeConfigRefOf(ms, t.Cluster).String())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// targetNamespaces are the namespaces the namespaceSelector targets of ms
// pick from: this cluster's (nil without such a target) and, by
// engine.ClusterID, those of the remote clusters of such targets, from a
// watch there (which wakes ms when they change). A remote cluster that
// cannot be read keeps the namespaces of the last evaluation, so that its
// targets fail as they are applied and the others go on; without them,
// the evaluation fails.
func (r *Reconciler) targetNamespaces(ctx context.Context, ms *v1alpha1.ManifestSync, st *syncState) ([]engine.Namespace, map[string][]engine.Namespace, error) {
	var (
		local  []engine.Namespace
		remote map[string][]engine.Namespace
	)
	for _, t := range ms.Spec.Targets {
		switch {
		case t.NamespaceSelector == nil:
		case t.Cluster == nil && local == nil:
			nss, err := Namespaces(ctx, r.Client)
			if err != nil {
				return nil, nil, err
			}
			local = nss
		case t.Cluster != nil:
			id := engine.ClusterID(t.Cluster)
			if _, done := remote[id]; done {
				continue
			}
			nss, err := r.remoteNamespaces(ctx, ms, t.Cluster)
			if err != nil {
				if st.eval == nil || st.eval.key.clusterNamespaces[id] == nil {
					return nil, nil, fmt.Errorf("target %q: %w", t.Name, err)
				}
				nss = st.eval.key.clusterNamespaces[id]
			}
			if remote == nil {
				remote = map[string][]engine.Namespace{}
			}
			remote[id] = nss
		}
	}
	return local, remote, nil
}

// remoteNamespaces lists the namespaces of the remote cluster c of ms.
func (r *Reconciler) remoteNamespaces(ctx context.Context, ms *v1alpha1.ManifestSync, c *v1alpha1.ClusterRef) ([]engine.Namespace, error) {
	rs, err := r.remoteWatches(ctx, ms, c)
	if err != nil {
		return nil, err
	}
	nss, err := rs.namespaces(ctx)
	if err != nil {
		return nil, rs.fail(err)
	}
	return nss, nil
}

// remoteSources watches what the ManifestSyncs read from one remote
// cluster, as one version of its kubeconfig reaches it (the objects of
// their sources, and its namespaces for their namespaceSelector targets):
// metadata caches per namespace and label selector (the bodies are read
// from the API server when a resourceVersion changed), and a probe of its
// API server. A change in the caches, and the cluster going down or
// coming back, wakes the ManifestSyncs that read it. While the probe fails, the sources of the
// cluster fail at once as unreachable, and the caches' list and watch
// calls wait for it, so that they resume within a second of its return.
type remoteSources struct {
	name        string // the kubeconfig Secret's
	ref         string // "<secret>/<key>"
	rc          *remoteClient
	ctx         context.Context
	cancel      context.CancelFunc
	probe       *APIServerProbe
	kinds       discovery.CachedDiscoveryInterface
	syncTimeout time.Duration
	// changed is called, coalesced, when something the sources may read
	// changed.
	changed chan struct{}

	mu      sync.Mutex
	caches  map[setCacheKey]cache.Cache
	watched map[setWatchKey]bool
}

// sourcesOf returns the source watches of the cluster ref, as rc reaches
// it, starting them on first use.
func (rs *remotes) sourcesOf(ref kubeConfigRef, rc *remoteClient) (*remoteSources, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.sources != nil {
		return rc.sources, nil
	}
	if rs.base == nil {
		return nil, fmt.Errorf("remote sources are not wired")
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(rc.config, rc.http)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	probe, err := NewAPIServerProbe(rc.config)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(rs.base)
	s := &remoteSources{
		name: ref.name, ref: ref.name + "/" + ref.key, rc: rc,
		ctx: ctx, cancel: cancel, probe: probe,
		kinds:       memory.NewMemCacheClient(dc),
		syncTimeout: rs.timeout,
		changed:     make(chan struct{}, 1),
		caches:      map[setCacheKey]cache.Cache{},
		watched:     map[setWatchKey]bool{},
	}
	probe.remote = true
	probe.log = ctrl.Log.WithName("cluster").WithValues("cluster", ref.name, "namespace", ref.namespace)
	probe.changed = s.change
	go func() { _ = probe.Start(ctx) }()
	rs.mu.Lock()
	idle := rs.idleCheck
	rs.mu.Unlock()
	go s.notify(idle, func() { rs.wake(rs.readers(ref)) }, func() bool { return len(rs.readers(ref)) > 0 }, func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.sources == s {
			rc.sources = nil
		}
		s.stop()
	})
	rc.sources = s
	return s, nil
}

// stop stops the caches and the probe.
func (s *remoteSources) stop() { s.cancel() }

// change records that something changed, for notify.
func (s *remoteSources) change() {
	select {
	case s.changed <- struct{}{}:
	default: // one is pending already
	}
}

// notify calls wake for the changes recorded, a burst (a cache's first
// list) at once, until the watches stop. Every idle period it asks
// whether some ManifestSync still reads the cluster (needed); when none
// does it drops the watches (the next reader starts them again).
func (s *remoteSources) notify(idle time.Duration, wake func(), needed func() bool, drop func()) {
	tick := time.NewTicker(idle)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.changed:
			wake()
		case <-tick.C:
			if !needed() {
				drop()
				return
			}
		}
	}
}

// cluster is the remote cluster as sources read it.
func (s *remoteSources) cluster() *sourceCluster {
	return &sourceCluster{
		ref: s.ref,
		object: func(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (client.Reader, error) {
			return s.metadata(ctx, gvk, namespace, labels.Everything())
		},
		set:        s.metadata,
		bodies:     func(*v1alpha1.ManifestSync) (client.Reader, error) { return s.rc.client, s.reachable() },
		namespaces: s.namespaces,
		kinds:      func() ([]schema.GroupVersionKind, error) { return namespacedKinds(s.kinds) },
		fail:       s.fail,
	}
}

// reachable fails, with a *downError, while the probe does.
func (s *remoteSources) reachable() error {
	if _, err := s.probe.down(); err != nil {
		return &downError{err}
	}
	return nil
}

// downError is the failure of a cluster that does not answer, or
// refuses the credentials, as its probe found.
type downError struct{ err error }

func (e *downError) Error() string { return clusterFailure(e.err) + ": " + e.err.Error() }
func (e *downError) Unwrap() error { return e.err }

// fail names the cluster in err, and says when it does not answer or
// refuses the credentials. A cluster that does not answer is the whole
// error, whatever was read when it was found out.
func (s *remoteSources) fail(err error) error {
	var down *downError
	if errors.As(err, &down) {
		return fmt.Errorf("cluster %q: %w", s.name, down)
	}
	if f := clusterFailure(err); f != "" {
		return fmt.Errorf("cluster %q: %s: %w", s.name, f, err)
	}
	return fmt.Errorf("cluster %q: %w", s.name, err)
}

// metadata watches the metadata of the objects of kind gvk in namespace
// that sel matches ("" and Namespace: the cluster's namespaces), and
// returns their cache once it has synced.
func (s *remoteSources) metadata(ctx context.Context, gvk schema.GroupVersionKind, namespace string, sel labels.Selector) (client.Reader, error) {
	if err := s.reachable(); err != nil {
		return nil, err
	}
	c, inf, err := s.informer(ctx, gvk, namespace, sel)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(s.syncTimeout)
	defer timer.Stop()
	select { // not WaitForCacheSync, which polls every 100ms: a whole namespace is read kind after kind
	case <-inf.HasSyncedChecker().Done():
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
	}
	if err := s.reachable(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("the cache of %s in namespace %q did not sync within %v", gvk.Kind, namespace, s.syncTimeout)
}

// informer returns the cache of namespace and sel, made on first use,
// and its informer of kind gvk, which wakes the cluster's readers on
// every change.
func (s *remoteSources) informer(ctx context.Context, gvk schema.GroupVersionKind, namespace string, sel labels.Selector) (cache.Cache, cache.Informer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := setCacheKey{namespace: namespace, selector: sel.String()}
	c := s.caches[key]
	if c == nil {
		opts := cache.Options{
			HTTPClient:       s.rc.http,
			Scheme:           s.rc.client.Scheme(),
			Mapper:           s.rc.mapper,
			DefaultTransform: cache.TransformStripManagedFields(),
			NewInformer:      s.probe.NewInformer,
		}
		if namespace != "" {
			opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
		}
		if !sel.Empty() {
			opts.DefaultLabelSelector = sel
		}
		var err error
		if c, err = cache.New(s.rc.config, opts); err != nil {
			return nil, nil, fmt.Errorf("creating the cache of namespace %q, objects %s: %w", namespace, sel, err)
		}
		go func() { _ = c.Start(s.ctx) }()
		s.caches[key] = c
	}
	// An unknown kind would make the watch retry forever; fail instead.
	if _, err := s.rc.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return nil, nil, err
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, nil, err
	}
	if wk := (setWatchKey{setCacheKey: key, gvk: gvk}); !s.watched[wk] {
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { s.change() },
			UpdateFunc: func(before, after any) {
				b, ok1 := before.(client.Object)
				a, ok2 := after.(client.Object)
				if !ok1 || !ok2 || b.GetResourceVersion() != a.GetResourceVersion() {
					s.change()
				}
			},
			DeleteFunc: func(any) { s.change() },
		}); err != nil {
			return nil, nil, err
		}
		s.watched[wk] = true
	}
	return c, inf, nil
}

// namespaces lists the cluster's namespaces from a watch of them.
func (s *remoteSources) namespaces(ctx context.Context) ([]engine.Namespace, error) {
	c, err := s.metadata(ctx, corev1.SchemeGroupVersion.WithKind("Namespace"), "", labels.Everything())
	if err != nil {
		return nil, err
	}
	return Namespaces(ctx, c)
}

// setupSourceClusters wires remote sources: the index of the clusters
// sources read, the channel through which their watches wake
// ManifestSyncs, and the lifetime of those watches (the manager's).
func (r *Reconciler) setupSourceClusters(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ManifestSync{}, indexClusterSources, func(o client.Object) []string {
		return clusterSourceKeys(o.(*v1alpha1.ManifestSync))
	}); err != nil {
		return err
	}
	events := make(chan event.GenericEvent)
	if err := r.watches.ctrl.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	base, cancel := context.WithCancel(context.Background())
	r.remotes.base = base
	r.remotes.idleCheck = time.Minute
	r.remotes.readers = func(ref kubeConfigRef) []reconcile.Request {
		return r.listBy(base, indexClusterSources, ref.String())
	}
	r.remotes.users = func(ref kubeConfigRef) []reconcile.Request {
		return r.listBy(base, indexKubeConfigs, ref.namespace+"/"+ref.name)
	}
	r.remotes.wake = func(reqs []reconcile.Request) {
		for _, req := range reqs {
			ms := &v1alpha1.ManifestSync{}
			ms.Namespace, ms.Name = req.Namespace, req.Name
			select {
			case events <- event.GenericEvent{Object: ms}:
			case <-base.Done():
				return
			}
		}
	}
	// The watches of remote sources stop with the manager.
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		cancel()
		return nil
	}))
}
