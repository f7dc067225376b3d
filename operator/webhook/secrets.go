package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// SecretCache reads the webhook Secrets for the Receiver without an API
// request per call: a flood of calls makes none.
//
// Why this way: the manager's cache of Secrets would hold every Secret
// body of the cluster in the operator's memory, which the operator never
// does. The SecretCache watches the Secrets' metadata only, and keeps of
// it the name, namespace and resourceVersion (not the annotations: kubectl
// apply's last-applied-configuration holds a Secret's data). It keeps the
// token of a Secret once a call has needed it, with the resourceVersion it
// was read at, and reads the Secret again (once, however many calls wait
// for it) only when the watch shows another resourceVersion. A Secret the
// watch does not know is not found, without a request. So the tokens held
// are those of the Secrets that opted-in ManifestSyncs name and that a
// call got far enough to need; one a deleted Secret is dropped at its next
// call.
type SecretCache struct {
	meta client.Reader // the metadata of Secrets
	api  client.Reader // reads a Secret when its resourceVersion changed

	mu     sync.Mutex
	tokens map[types.NamespacedName]cachedToken
	reads  singleflight.Group
}

// readTimeout bounds a read of a Secret.
const readTimeout = 10 * time.Second

type cachedToken struct {
	resourceVersion string
	token           []byte
}

// NewSecretCache makes a SecretCache of mgr's cluster, whose watch the
// manager starts (and syncs before the receiver serves). newInformer,
// when not nil, makes its informer, as the operator's other caches'
// (controller.APIServerProbe's, which resumes watches within a second of
// an API server outage rather than after client-go's backoff).
func NewSecretCache(mgr manager.Manager, newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer) (*SecretCache, error) {
	secretMeta := &metav1.PartialObjectMetadata{}
	secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:       mgr.GetHTTPClient(),
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		DefaultTransform: keepIdentity,
		NewInformer:      newInformer,
	})
	if err != nil {
		return nil, fmt.Errorf("the webhook's cache of Secret metadata: %w", err)
	}
	// Registered now, started with the cache.
	if _, err := c.GetInformer(context.Background(), secretMeta, cache.BlockUntilSynced(false)); err != nil {
		return nil, fmt.Errorf("the webhook's watch of Secret metadata: %w", err)
	}
	if err := mgr.Add(cacheRunnable{c}); err != nil {
		return nil, err
	}
	return newSecretCache(c, mgr.GetAPIReader()), nil
}

func newSecretCache(meta, api client.Reader) *SecretCache {
	return &SecretCache{meta: meta, api: api, tokens: map[types.NamespacedName]cachedToken{}}
}

// cacheRunnable makes the manager start the cache with its own caches,
// before the receiver serves.
type cacheRunnable struct{ cache.Cache }

func (c cacheRunnable) GetCache() cache.Cache { return c.Cache }

// keepIdentity keeps of an object's metadata what the SecretCache reads:
// name, namespace, resourceVersion.
func keepIdentity(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, ResourceVersion: m.ResourceVersion,
	}}, nil
}

// ErrOnlySecrets is what the SecretCache answers for anything but a Get
// of a Secret.
var ErrOnlySecrets = errors.New("the webhook's Secret cache reads Secrets one at a time")

// Get reads the Secret at key into obj (a *corev1.Secret), with only its
// SecretKey in Data.
func (c *SecretCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return ErrOnlySecrets
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := c.meta.Get(ctx, key, meta); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(key)
		}
		return err
	}
	c.mu.Lock()
	t, ok := c.tokens[key]
	c.mu.Unlock()
	if !ok || t.resourceVersion != meta.ResourceVersion {
		v, err, _ := c.reads.Do(key.String()+"@"+meta.ResourceVersion, func() (any, error) {
			// A read that ended between the look above and this one
			// kept what it read: no second read.
			c.mu.Lock()
			t, ok := c.tokens[key]
			c.mu.Unlock()
			if ok && t.resourceVersion == meta.ResourceVersion {
				return t, nil
			}
			// Calls that wait share the read: the first one's end must
			// not end it.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
			defer cancel()
			return c.read(ctx, key, meta.ResourceVersion)
		})
		if err != nil {
			return err
		}
		t = v.(cachedToken)
	}
	secret.Name, secret.Namespace, secret.ResourceVersion = key.Name, key.Namespace, t.resourceVersion
	secret.Data = map[string][]byte{}
	if t.token != nil {
		secret.Data[SecretKey] = t.token
	}
	return nil
}

// read reads the Secret and keeps its token under seen, the
// resourceVersion the watch showed: the watch may lag behind the read.
func (c *SecretCache) read(ctx context.Context, key client.ObjectKey, seen string) (cachedToken, error) {
	var s corev1.Secret
	if err := c.api.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(key)
		}
		return cachedToken{}, err
	}
	t := cachedToken{resourceVersion: seen, token: s.Data[SecretKey]}
	c.mu.Lock()
	c.tokens[key] = t
	c.mu.Unlock()
	return t, nil
}

func (c *SecretCache) forget(key client.ObjectKey) {
	c.mu.Lock()
	delete(c.tokens, key)
	c.mu.Unlock()
}

// List is not supported: the receiver reads Secrets one at a time.
func (c *SecretCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return ErrOnlySecrets
}

var _ client.Reader = (*SecretCache)(nil)
