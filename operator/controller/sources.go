package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
)

// GitProvider makes the git provider of one reconcile from the
// credentials of its ManifestSync (see gitCredentials) and the public
// keys of its sources' verify (read as its service account, as
// credentials are). `engine operator` runs the Provider of a GitCache.
type GitProvider func(creds git.Credentials, keys git.Keyring) source.GitFetcher

// NewGitProvider fetches with go-git through one shared git.Fetcher, which
// caches repositories under cacheDir, or in memory when it is empty, and
// waits for each fetch to end (as the CLI and the benchmarks want; the
// operator's GitCache waits GitWait at most).
func NewGitProvider(cacheDir string) GitProvider {
	c := &GitCache{Fetcher: git.New(git.Options{CacheDir: cacheDir})}
	return c.Provider
}

// GitWait is how long a reconcile waits for a git server before it yields
// its worker: the fetch goes on in the background and wakes the
// ManifestSync when it ends, so that a server that does not answer delays
// no other ManifestSync.
const GitWait = 2 * time.Second

// GitSweepPeriod is how often `engine operator` drops the repositories no
// ManifestSync names (GitCache.Sweeper).
const GitSweepPeriod = 20 * time.Second

// GitCache is the operator's one git.Fetcher: its cache of repositories
// and snapshots, bounded in bytes (git.Options.MaxCacheBytes), and let go
// of by Sweeper when no ManifestSync names a repository any more.
type GitCache struct {
	Fetcher *git.Fetcher
}

// NewGitCache returns the cache opts describe; a zero opts.Wait is GitWait.
func NewGitCache(opts git.Options) *GitCache {
	if opts.Wait <= 0 {
		opts.Wait = GitWait
	}
	return &GitCache{Fetcher: git.New(opts)}
}

// Provider is the GitProvider of the cache.
func (c *GitCache) Provider(creds git.Credentials, keys git.Keyring) source.GitFetcher {
	return git.Provider{Fetcher: c.Fetcher, Credentials: creds, Keys: keys}
}

// Sweeper returns the runnable that, every period, drops from the cache
// every repository no ManifestSync's git source names (read from reader,
// the manager's cache): a deleted ManifestSync's repository leaves memory
// within a period.
func (c *GitCache) Sweeper(reader client.Reader, period time.Duration) manager.Runnable {
	return sweeper(reader, period, func(list *v1alpha1.ManifestSyncList) {
		var urls []string
		for _, ms := range list.Items {
			for _, src := range ms.Spec.Sources {
				if src.Git != nil {
					urls = append(urls, src.Git.URL)
				}
			}
		}
		c.Fetcher.Keep(urls)
	})
}

// sweeper returns the runnable that, every period, gives sweep the
// ManifestSyncs reader lists (the manager's cache); a failed list skips
// the period, and the cache is kept until the list works again.
func sweeper(reader client.Reader, period time.Duration, sweep func(*v1alpha1.ManifestSyncList)) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			var list v1alpha1.ManifestSyncList
			if err := reader.List(ctx, &list); err == nil {
				sweep(&list)
			}
		}
	})
}

// wakeAfterFetch wakes ms when the git and helm fetches it did not wait
// for end: a server slower than GitWait, whose fetch goes on in the
// background, gave its reconcile a *source.PendingError (git.PendingError
// is the same) or the source's last snapshot (with Pending set); the
// reconcile yielded its worker.
func (r *Reconciler) wakeAfterFetch(ms *v1alpha1.ManifestSync, snaps map[string]*engine.Snapshot, err error) {
	if r.remotes == nil || r.remotes.wake == nil {
		return
	}
	var pending []<-chan struct{}
	if pe, ok := errors.AsType[*git.PendingError](err); ok {
		pending = append(pending, pe.Done)
	}
	for _, snap := range snaps {
		if snap.Pending != nil {
			pending = append(pending, snap.Pending)
		}
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	for _, done := range pending {
		go func() {
			<-done // closed by the fetch's own timeout at the latest
			r.remotes.wake([]reconcile.Request{req})
		}()
	}
}

// fetchSources returns the snapshot of every git, helm, object and object
// set source, through the one source.Resolver the CLI uses too: git and
// helm with the credentials of ms's secretRefs, objects through the
// readers of objectReaders. Kustomize sources are built by the engine from the
// snapshots they name.
func (r *Reconciler) fetchSources(ctx context.Context, ms *v1alpha1.ManifestSync, st *syncState) (map[string]*engine.Snapshot, error) {
	forgetGoneSources(ms, st)
	res := source.Resolver{
		Namespace: ms.Namespace,
		Objects:   r.objectReaders(ctx, ms, st),
		Observe: func(src *v1alpha1.Source, kind string, took time.Duration, err error) {
			sourceDuration.WithLabelValues(ms.Namespace, ms.Name, src.Name, kind).Observe(took.Seconds())
			if kind == "git" && r.Git != nil {
				gitFetchesTotal.WithLabelValues(ms.Namespace, ms.Name, src.Name, fetchResult(err)).Inc()
			}
			if kind == "helm" && r.Helm != nil {
				helmFetchesTotal.WithLabelValues(ms.Namespace, ms.Name, src.Name, helmFetchResult(err)).Inc()
			}
			if kind == "oci" && r.OCI != nil {
				ociFetchesTotal.WithLabelValues(ms.Namespace, ms.Name, src.Name, ociFetchResult(err)).Inc()
			}
			if kind == "http" && r.HTTP != nil {
				httpFetchesTotal.WithLabelValues(ms.Namespace, ms.Name, src.Name, ociFetchResult(err)).Inc()
			}
		},
	}
	if r.Git != nil {
		res.Git = r.Git(r.gitCredentials(ms), git.SecretKeys(ms.Namespace, r.secrets(ms)))
	}
	if r.Helm != nil {
		res.Helm = r.Helm(r.helmCredentials(ms))
	}
	if r.OCI != nil {
		res.OCI = r.OCI(r.secrets(ms))
	}
	if r.HTTP != nil {
		res.HTTP = r.HTTP(r.secrets(ms))
	}
	dec, err := r.decrypter(ctx, ms)
	if err != nil {
		return nil, err
	}
	res.Decrypt = dec
	snaps, err := res.Resolve(ctx, ms.Spec.Sources)
	r.wakeAfterFetch(ms, snaps, err)
	return snaps, err
}

// gitCredentials reads the Secret a git source's secretRef names, in ms's
// namespace, as ms's service account when it has one (so that a tenant
// cannot borrow credentials its account may not read), and uncached, so
// that no Secret body is cached cluster-wide.
func (r *Reconciler) gitCredentials(ms *v1alpha1.ManifestSync) git.Credentials {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*git.Auth, error) {
		data, err := r.secretData(ctx, ms, ref)
		if err != nil {
			return nil, err
		}
		return git.FromSecretData(data), nil
	}
}

// OCIProvider makes the oci provider of one reconcile; secrets reads the
// Secrets its sources name (secretRef, verify.secretRef) as the
// ManifestSync's service account.
type OCIProvider func(secrets source.Secrets) source.OCIFetcher

// HTTPProvider makes the http provider of one reconcile, as OCIProvider.
type HTTPProvider func(secrets source.Secrets) source.HTTPFetcher

// secrets is secretData for ms, as the providers take it.
func (r *Reconciler) secrets(ms *v1alpha1.ManifestSync) source.Secrets {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		return r.secretData(ctx, ms, ref)
	}
}

// secretData reads the data of the Secret a source's secretRef names, in
// ms's namespace, as ms's service account when it has one; its errors name
// the Secret, never its data.
func (r *Reconciler) secretData(ctx context.Context, ms *v1alpha1.ManifestSync, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
	secrets, err := r.reader(ms)
	if err != nil {
		return nil, err
	}
	var secret corev1.Secret
	if err := secrets.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: ref.Name}, &secret); err != nil {
		return nil, fmt.Errorf("secretRef %s/%s: %w", ms.Namespace, ref.Name, err)
	}
	return secret.Data, nil
}

// objectReaders gives the reader of each object and object set source of
// ms: the local cluster's, through the metadata caches, as ms's service
// account, within the allow-list. This is where a source that names
// another cluster gets that cluster's reader.
func (r *Reconciler) objectReaders(ctx context.Context, ms *v1alpha1.ManifestSync, st *syncState) func(src *v1alpha1.Source) (source.ObjectReader, error) {
	return func(src *v1alpha1.Source) (source.ObjectReader, error) {
		sc, err := r.sourceClusterOf(ctx, ms, src) // this cluster, or the remote one src.Cluster names
		if err != nil {
			return nil, err
		}
		return &clusterObjects{ms: ms, sc: sc, st: st}, nil
	}
}

// clusterObjects reads object and object set sources of ms from one
// cluster, local or remote; st keeps the bodies read, so that steady state
// reads nothing.
type clusterObjects struct {
	ms *v1alpha1.ManifestSync
	sc *sourceCluster
	st *syncState
}

// Get implements source.ObjectReader.
func (c *clusterObjects) Get(ctx context.Context, o v1alpha1.ObjectSource) (map[string]any, error) {
	snap, err := objectSource(ctx, c.ms, c.sc, &o, c.st)
	if err != nil {
		return nil, c.sc.fail(err)
	}
	return snap.Object, nil
}

// List implements source.ObjectReader.
func (c *clusterObjects) List(ctx context.Context, name string, set *engine.ObjectSet) ([]map[string]any, error) {
	objs, err := objectSetSource(ctx, c.ms, c.sc, name, set, c.st)
	if err != nil {
		return nil, c.sc.fail(err)
	}
	return objs, nil
}

// forgetGoneSources drops the metric series of the sources read before
// that are no longer in the spec.
func forgetGoneSources(ms *v1alpha1.ManifestSync, st *syncState) {
	names := make([]string, 0, len(ms.Spec.Sources))
	for _, src := range ms.Spec.Sources {
		names = append(names, src.Name)
	}
	for _, name := range st.sourceNames {
		if !slices.Contains(names, name) {
			forgetSourceMetrics(ms.Namespace, ms.Name, name)
		}
	}
	st.sourceNames = names
}

// objectRef is an object source, resolved: its kind and where it lives.
type objectRef struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	cluster   string // "" or a remote one (sourceCluster.ref)
}

func (o objectRef) String() string {
	return v1alpha1.ObjectID{Namespace: o.namespace, Name: o.name, Group: o.gvk.Group, Kind: o.gvk.Kind}.String()
}

// indexKey is the object's key in the ManifestSync index of object sources.
func (o objectRef) indexKey() string {
	return o.gvk.Group + "/" + o.gvk.Kind + "/" + o.namespace + "/" + o.name
}

// objectRefOf resolves an object source of ms; the namespace defaults to
// the ManifestSync's.
func objectRefOf(ms *v1alpha1.ManifestSync, o *v1alpha1.ObjectSource) (objectRef, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return objectRef{}, err
	}
	ns := o.Namespace
	if ns == "" {
		ns = ms.Namespace
	}
	return objectRef{gvk: gv.WithKind(o.Kind), namespace: ns, name: o.Name}, nil
}

// objectSource reads an object source. The body is read from the API
// server only when the object's resourceVersion, as the metadata cache
// sees it, differs from the snapshot read last; steady state reads nothing.
func objectSource(ctx context.Context, ms *v1alpha1.ManifestSync, sc *sourceCluster, o *v1alpha1.ObjectSource, st *syncState) (*engine.Snapshot, error) {
	ref, err := objectRefOf(ms, o)
	if err != nil {
		return nil, err
	}
	ref.cluster = sc.ref
	cached, err := sc.object(ctx, ref.gvk, ref.namespace)
	if err != nil {
		return nil, fmt.Errorf("%s: watching: %w", ref, err)
	}
	key := client.ObjectKey{Namespace: ref.namespace, Name: ref.name}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(ref.gvk)
	if err := cached.Get(ctx, key, meta); err == nil {
		if snap := st.sources[ref]; snap != nil && snap.Revision == "resourceVersion:"+meta.ResourceVersion {
			if err := sc.allowed(ms, ref, meta.Annotations); err != nil {
				return nil, err
			}
			return snap, nil
		}
	}
	// The body is read as the ManifestSync's service account, if any: a
	// tenant reads only what its account may.
	reader, err := sc.bodies(ms)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(ref.gvk)
	if err := reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			if sc.ref == "" && ref.namespace != ms.Namespace {
				return nil, accessRefused(ms, ref) // as when it exists, unshared
			}
			return nil, fmt.Errorf("%s %w", ref, source.ErrNotFound)
		}
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if err := sc.allowed(ms, ref, obj.GetAnnotations()); err != nil {
		return nil, err
	}
	// Scripts see the object as users wrote it, not the server's
	// bookkeeping of who wrote which field.
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	snap := source.ObjectSnapshot(obj.Object)
	st.sources[ref] = snap
	return snap, nil
}

// allowed reports whether ms may read the object source ref, whose
// annotations are given: an object of ms's own namespace always, one of
// another namespace only when it shares itself with ms's namespace. The
// error is accessRefused's.
func allowed(ms *v1alpha1.ManifestSync, ref objectRef, annotations map[string]string) error {
	if SharedWith(ms.Namespace, ref.namespace, annotations) {
		return nil
	}
	return accessRefused(ms, ref)
}

// SharedWith reports whether an object of namespace objNamespace, with
// annotations, may be read as a source by a ManifestSync of namespace
// home: one of its own namespace always, one of another only when its
// AllowNamespacesAnnotation names home or "*". The web UI's evaluation
// keeps to it as the operator does.
func SharedWith(home, objNamespace string, annotations map[string]string) bool {
	if objNamespace == home {
		return true
	}
	for _, ns := range strings.Split(annotations[AllowNamespacesAnnotation], ",") {
		if ns = strings.TrimSpace(ns); ns == "*" || ns == home {
			return true
		}
	}
	return false
}

// accessRefused is the one error of an object source of another namespace
// of this cluster that ms may not read, whether the object is missing or
// exists and is not shared with ms's namespace: two messages would let a
// tenant probe for any object of the cluster by naming it. (With a
// service account, the API server's own 403 comes first.)
func accessRefused(ms *v1alpha1.ManifestSync, ref objectRef) error {
	return fmt.Errorf("%s: access refused: not found, or not shared with namespace %q (annotation %s)", ref, ms.Namespace, AllowNamespacesAnnotation)
}

// sourceIndexKeys are the index keys of every object source of ms, and
// of the ConfigMaps and Secrets its sources' refs read (substituteFrom,
// valuesFrom), so that a change of one wakes ms.
func sourceIndexKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, s := range ms.Spec.Sources {
		for _, r := range source.RefsOf(&s) {
			ref := objectRef{gvk: corev1.SchemeGroupVersion.WithKind(r.Kind), namespace: ms.Namespace, name: r.Name}
			keys = append(keys, ref.indexKey())
		}
		if s.Object == nil || s.Cluster != nil { // a remote one's events come from its cluster
			continue
		}
		if ref, err := objectRefOf(ms, s.Object); err == nil {
			keys = append(keys, ref.indexKey())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
