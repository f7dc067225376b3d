package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
	"github.com/manifestsync/manifestsync/operator/shard"
)

// inCluster is the cluster of the targets without spec.targets[].cluster,
// as the engine names it.
const inCluster = "in-cluster"

// indexKubeConfigs indexes ManifestSyncs by the kubeconfig Secrets of their
// remote targets, "namespace/name".
const indexKubeConfigs = "manifestsync.dev/kubeconfig-secrets"

// defaultKubeConfigKey is the key of a kubeConfigSecretRef without one.
const defaultKubeConfigKey = ssa.DefaultKubeConfigKey

// cluster is where one target's objects go, and the clients that reach
// them: this cluster (as the operator, or as the ManifestSync's service
// account) or a remote one (with the credentials of its kubeconfig).
type cluster struct {
	// name names the cluster in messages and status rows: "in-cluster" or
	// the kubeconfig Secret's name.
	name string
	// ref is the cluster as the inventory records it: "" or
	// "<secret>/<key>".
	ref string
	// client writes; live reads target objects from the API server.
	client client.Client
	live   client.Reader
	// managed is the metadata cache of owned objects; remote clusters
	// have none, so their drift is found at each resync, not watched.
	managed client.Reader
	// namespaces reads the target namespaces' metadata.
	namespaces client.Reader
	remote     bool
	// shard is this replica's ShardLabel value (Options.ShardID); ""
	// without sharding. With it, managed holds only the objects carrying
	// it: one it does not hold may be ours still, labelled by the replica
	// that had the ManifestSync before (see shard.go).
	shard string
}

// applier returns base's applier writing to c.
func (c *cluster) applier(base *applier) *applier {
	a := *base
	a.client, a.live, a.managed = c.client, c.live, c.managed
	return &a
}

// apply applies one object of target with a, recording the cluster in its
// inventory item and, for a remote cluster, naming it in its error.
// A write of a write war is refused, as a Conflict, without a request.
func (c *cluster) apply(ctx context.Context, a *applier, obj *unstructured.Unstructured, digest, target string) Change {
	key := writeKey{writer: a.owner + "/" + target, cluster: c.ref, id: v1alpha1.IDOf(obj)}
	var ch Change
	if err := a.guard.allow(key, digest); err != nil {
		ch = Change{Item: itemOf(obj, target), Action: ActionConflict, Err: err}
	} else if ch = a.apply(ctx, obj, digest, target); ch.wrote() {
		a.guard.wrote(key, digest)
	}
	ch.Item.cluster = c.ref
	if c.remote && ch.Err != nil && !c.down(ch.Err) {
		ch.Err = fmt.Errorf("cluster %q: %w", c.name, ch.Err)
	}
	return ch
}

// down reports whether err, of a request to c, means that c cannot be
// used at all; only remote clusters go down on their own.
func (c *cluster) down(err error) bool {
	return c.remote && clusterFailure(err) != ""
}

// targetError is err of target t, naming c when it is remote and saying
// when it is down.
func (c *cluster) targetError(t *engine.TargetResult, err error) error {
	var unreachable *unreachableError
	switch {
	case !c.remote:
		return fmt.Errorf("target %q: %w", t.ID(), err)
	case errors.As(err, &unreachable): // says so itself
		return fmt.Errorf("target %q: cluster %q: %w", t.ID(), c.name, unreachable)
	case c.down(err):
		return fmt.Errorf("target %q: cluster %q: %s: %w", t.ID(), c.name, clusterFailure(err), err)
	}
	return fmt.Errorf("target %q: cluster %q: %w", t.ID(), c.name, err)
}

// clusterOf is the cluster of an evaluated target.
func (r *Reconciler) clusterOf(ctx context.Context, ms *v1alpha1.ManifestSync, t *engine.TargetResult) (*cluster, error) {
	for i := range ms.Spec.Targets {
		if st := &ms.Spec.Targets[i]; st.Name == t.Name && st.Cluster != nil {
			return r.remoteCluster(ctx, ms, st.Cluster.KubeConfigSecretRef)
		}
	}
	return r.localCluster(ms)
}

// clusterByRef is the cluster of an inventory entry.
func (r *Reconciler) clusterByRef(ctx context.Context, ms *v1alpha1.ManifestSync, ref string) (*cluster, error) {
	if ref == "" {
		return r.localCluster(ms)
	}
	name, key, _ := strings.Cut(ref, "/")
	return r.remoteCluster(ctx, ms, v1alpha1.SecretKeyReference{Name: name, Key: key})
}

// remoteCluster is the cluster whose kubeconfig the Secret of ms's
// namespace holds.
func (r *Reconciler) remoteCluster(ctx context.Context, ms *v1alpha1.ManifestSync, ref v1alpha1.SecretKeyReference) (*cluster, error) {
	kc := secretKubeConfig(ms, ref)
	reader, err := r.reader(ms)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.Name, err)
	}
	rc, err := r.remotes.get(ctx, kc, reader)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.Name, err)
	}
	c := rc.client
	return &cluster{
		name: ref.Name, ref: ref.Name + "/" + kc.key, remote: true,
		client: c, live: c, managed: noCache{}, namespaces: c, shard: r.Options.ShardID,
	}, nil
}

// noCache is the managed cache of a remote cluster: it holds nothing, so
// that every read goes to the API server.
type noCache struct{}

func (noCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (noCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("remote clusters have no cache")
}

// clusterFailure says why a request's error means the whole cluster
// cannot be used: it does not answer ("unreachable"), refuses our
// credentials ("unauthorized"), or this replica of --shards auto may
// write nowhere ("fenced": its Lease's guard refused the write); "" for
// errors of one object.
func clusterFailure(err error) string {
	var status apierrors.APIStatus
	switch {
	case err == nil, apimeta.IsNoMatchError(err), errors.Is(err, context.Canceled):
		return ""
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case errors.Is(err, shard.ErrFenced):
		return "fenced" // this replica's Lease was not renewed: it writes nowhere
	case errors.As(err, &status):
		return ""
	}
	return "unreachable"
}

// kubeConfigRef is a kubeconfig: a key of a Secret.
type kubeConfigRef struct{ namespace, name, key string }

// remotes builds and caches a client per kubeconfig Secret, rebuilt when
// the Secret changes. The Secrets of the namespaces of remote targets'
// ManifestSyncs are watched (their metadata only, from the first remote
// target on) so that a changed kubeconfig resyncs the ManifestSyncs that
// use it.
//
// A kubeconfig Secret is read as the ManifestSync that uses it reads its
// sources (r.reader: as its service account, when it has one), so that a
// tenant uses only the kubeconfigs it may read; the client built from it
// is shared by the readers that could, each checked again every
// accessRecheck (RBAC changes) and whenever the Secret changes.
type remotes struct {
	scheme  *runtime.Scheme
	timeout time.Duration
	// allowExec lets kubeconfigs run credential plugins
	// (Options.AllowKubeconfigExec).
	allowExec bool
	// qps and burst are the client-side limit of the operator's own
	// client (rest.Config's): none unless one was asked for.
	qps   float32
	burst int
	// watch watches the Secrets of a namespace, on first use, and returns
	// the cache of their metadata.
	watch func(namespace string) (client.Reader, error)
	// base is the context of the watches of remote clusters (see
	// sourceclusters.go); readers are the ManifestSyncs that need the
	// watches of a cluster, and wake enqueues them. Every idleCheck,
	// watches no ManifestSync needs stop.
	base    context.Context
	readers func(kubeConfigRef) []reconcile.Request
	wake    func([]reconcile.Request)
	// users are the ManifestSyncs that use a kubeconfig (targets and
	// sources): those a cluster found back wakes.
	users     func(kubeConfigRef) []reconcile.Request
	idleCheck time.Duration
	// guard wraps every remote client's transport, outermost
	// (Options.RemoteTransport); nil wraps none.
	guard func(http.RoundTripper) http.RoundTripper

	mu      sync.Mutex
	clients map[kubeConfigRef]*remoteClient
}

// remoteClient is a remote cluster as one version of its kubeconfig
// Secret reaches it: a client and, once a source reads the cluster, the
// watches of its sources (see sourceclusters.go), stopped when the Secret
// changes.
type remoteClient struct {
	resourceVersion string // the Secret's, when the client was built
	client          client.Client
	config          *rest.Config
	http            *http.Client
	mapper          apimeta.RESTMapper

	// reach is whether the cluster answers; cancel stops its probes.
	reach  *reachability
	cancel context.CancelFunc

	mu      sync.Mutex
	sources *remoteSources // made on first use
	// verified are the readers that read the Secret of this version, and
	// when they last did.
	verified map[client.Reader]time.Time
}

// readBy reports whether reader read the Secret of this client within
// accessRecheck.
func (rc *remoteClient) readBy(reader client.Reader) bool {
	if !reflect.TypeOf(reader).Comparable() {
		return false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	at, ok := rc.verified[reader]
	return ok && time.Since(at) < accessRecheck
}

// readNow records that reader read the Secret of this client.
func (rc *remoteClient) readNow(reader client.Reader) {
	if !reflect.TypeOf(reader).Comparable() {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.verified == nil {
		rc.verified = map[client.Reader]time.Time{}
	}
	rc.verified[reader] = time.Now()
}

// stop stops the watches of the cluster's sources, if any.
func (rc *remoteClient) stop() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.sources != nil {
		rc.sources.stop()
	}
	if rc.cancel != nil {
		rc.cancel()
	}
}

// get returns the client of the kubeconfig ref, building it when the
// Secret is new or changed; reader reads the Secret (as the ManifestSync
// that uses it). It fails at once, naming the reason, while the cluster
// is unreachable; a client just built first probes the cluster, for at
// most contactTimeout.
func (rs *remotes) get(ctx context.Context, ref kubeConfigRef, reader client.Reader) (*remoteClient, error) {
	key := client.ObjectKey{Namespace: ref.namespace, Name: ref.name}
	version := "" // as the operator's watch of Secrets has it
	if secrets, err := rs.watch(ref.namespace); err == nil {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if secrets.Get(ctx, key, meta) == nil {
			version = meta.ResourceVersion
		}
	}
	rs.mu.Lock()
	cached := rs.clients[ref]
	rs.mu.Unlock()
	if cached != nil && version != "" && cached.resourceVersion == version && cached.readBy(reader) {
		return cached, cached.reach.err()
	}
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			rs.forget(ref)
			return nil, fmt.Errorf("kubeconfig Secret %q not found", ref.name)
		}
		return nil, fmt.Errorf("reading kubeconfig Secret %q: %w", ref.name, err)
	}
	if cached != nil && cached.resourceVersion == secret.ResourceVersion {
		cached.readNow(reader) // the cache lags behind, or another reader built it
		return cached, cached.reach.err()
	}
	rc, err := rs.build(ref, secret.Data[ref.key])
	if err != nil {
		rs.forget(ref)
		return nil, fmt.Errorf("kubeconfig Secret %q, key %q: %w", ref.name, ref.key, err)
	}
	rc.resourceVersion = secret.ResourceVersion
	rc.readNow(reader)
	rs.mu.Lock()
	old := rs.clients[ref]
	rs.clients[ref] = rc
	rs.mu.Unlock()
	if old != nil {
		old.stop() // its watches used the credentials replaced
	}
	return rc, rc.reach.contact(ctx)
}

// forget drops the client of ref, and stops its watches.
func (rs *remotes) forget(ref kubeConfigRef) {
	rs.mu.Lock()
	old := rs.clients[ref]
	delete(rs.clients, ref)
	rs.mu.Unlock()
	if old != nil {
		old.stop()
	}
}

// errKubeconfigExec refuses a kubeconfig with a credential plugin.
var errKubeconfigExec = ssa.ErrKubeconfigExec

// kubeConfigREST is the config of a kubeconfig a Secret holds
// (ssa.KubeConfigREST: no files, no programs unless allowExec).
func kubeConfigREST(kubeconfig []byte, allowExec bool) (*rest.Config, error) {
	return ssa.KubeConfigREST(kubeconfig, allowExec)
}

// build makes a client from a kubeconfig. Requests time out quickly, so
// that an unreachable cluster fails its targets instead of stalling the
// reconcile. A kubeconfig may not name files, nor run programs unless
// allowExec: those would run, or read, on the operator's machine with the
// operator's rights.
func (rs *remotes) build(ref kubeConfigRef, kubeconfig []byte) (*remoteClient, error) {
	cfg, err := kubeConfigREST(kubeconfig, rs.allowExec)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = rs.timeout
	cfg.QPS, cfg.Burst = rs.qps, rs.burst
	cfg.UserAgent = FieldManager + "-operator"
	base := rs.base
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	reach, err := newReachability(ctx, cfg, min(rs.timeout, contactTimeout),
		ctrl.Log.WithName("cluster").WithValues("cluster", ref.name, "namespace", ref.namespace))
	if err != nil {
		cancel()
		return nil, err
	}
	reach.wake = func() {
		if rs.users != nil && rs.wake != nil {
			rs.wake(rs.users(ref))
		}
	}
	reach.needed = func() bool { return rs.users == nil || len(rs.users(ref)) > 0 }
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &remoteTransport{next: rt, reach: reach, timeout: rs.timeout}
	})
	if rs.guard != nil {
		cfg.Wrap(rs.guard) // its refusals never reach the reachability probe
	}
	rc, err := rs.clientFor(cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	rc.reach, rc.cancel = reach, cancel
	return rc, nil
}

// clientFor makes the clients of cfg.
func (rs *remotes) clientFor(cfg *rest.Config) (*remoteClient, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: rs.scheme, Mapper: mapper, HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	return &remoteClient{client: c, config: cfg, http: hc, mapper: mapper}, nil
}

// setupClusters prepares remote clusters and tenancy: the clients' caches,
// the index of kubeconfig Secrets, and the watch of Secrets (started on
// first use, in the namespaces of remote targets' ManifestSyncs only).
func (r *Reconciler) setupClusters(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ManifestSync{}, indexKubeConfigs, func(o client.Object) []string {
		return kubeConfigKeys(o.(*v1alpha1.ManifestSync))
	}); err != nil {
		return err
	}
	r.accounts = &accounts{config: mgr.GetConfig(), scheme: mgr.GetScheme(), mapper: r.Mapper, clients: map[string]client.Client{}}
	r.remotes = &remotes{
		scheme:    mgr.GetScheme(),
		timeout:   r.Options.remoteTimeout(),
		allowExec: r.Options.AllowKubeconfigExec,
		qps:       mgr.GetConfig().QPS,
		burst:     mgr.GetConfig().Burst,
		guard:     r.Options.RemoteTransport,
		clients:   map[kubeConfigRef]*remoteClient{},
		watch: func(namespace string) (client.Reader, error) {
			return r.watches.kubeConfigs(namespace, r.forKubeConfig)
		},
	}
	return r.setupSourceClusters(ctx, mgr)
}

// kubeConfigKeys are the index keys of ms's kubeconfig Secrets, of its
// targets and its sources.
func kubeConfigKeys(ms *v1alpha1.ManifestSync) []string {
	var keys []string
	for _, t := range ms.Spec.Targets {
		if t.Cluster != nil {
			keys = append(keys, ms.Namespace+"/"+t.Cluster.KubeConfigSecretRef.Name)
		}
	}
	for _, s := range ms.Spec.Sources {
		if s.Cluster != nil {
			keys = append(keys, ms.Namespace+"/"+s.Cluster.KubeConfigSecretRef.Name)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// forKubeConfig maps a Secret to the ManifestSyncs using it as a kubeconfig.
func (r *Reconciler) forKubeConfig(ctx context.Context, secret client.Object) []reconcile.Request {
	return r.listBy(ctx, indexKubeConfigs, secret.GetNamespace()+"/"+secret.GetName())
}

// clusterRefOf is the cluster of an evaluated target as the inventory
// records it.
func clusterRefOf(ms *v1alpha1.ManifestSync, t *engine.TargetResult) string {
	return ssa.ClusterRefOf(ms, t)
}

// clusterMemo resolves the clusters of inventory entries, once each per
// pass; a cluster that failed as a whole fails its other entries at once.
type clusterMemo struct {
	r        *Reconciler
	ms       *v1alpha1.ManifestSync
	clusters map[string]*cluster
	errs     map[string]error
}

func (m *clusterMemo) get(ctx context.Context, ref string) (*cluster, error) {
	if err := m.errs[ref]; err != nil {
		return nil, err
	}
	if c := m.clusters[ref]; c != nil {
		return c, nil
	}
	c, err := m.r.clusterByRef(ctx, m.ms, ref)
	if err != nil {
		m.fail(ref, err)
		return nil, err
	}
	if m.clusters == nil {
		m.clusters = map[string]*cluster{}
	}
	m.clusters[ref] = c
	return c, nil
}

func (m *clusterMemo) fail(ref string, err error) {
	if m.errs == nil {
		m.errs = map[string]error{}
	}
	m.errs[ref] = err
}
