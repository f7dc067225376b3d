package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// cachedMeta is what the managed cache keeps of an object's metadata: its
// name, namespace, resourceVersion and deletion, our owner label and
// digest annotation, and the digest of the fields we own (ownedFields) in
// place of its managed fields. With a fan-out of tens of thousands of
// copies the cache is most of the operator's memory, and this is a
// quarter of a PartialObjectMetadata.
//
// It is a read-only client.Object. The cache's readers get it as the
// PartialObjectMetadata they ask for: DeepCopyObject, which the cache
// calls on every read, makes one (see keepOwnFields). Its event handlers
// read it through metav1.Object, where what it does not keep reads as
// unset; nothing writes to an object of the cache, and its setters do
// nothing.
type cachedMeta struct {
	kind *sharedKind
	// namespace and name are shared with the cache's other objects of
	// the same namespace or name (a fan-out's copies).
	namespace, name string
	resourceVersion string
	deletion        *metav1.Time
	labels          map[string]string // {OwnerLabel: owner}, shared by the owner's objects; nil without
	fields          fieldsDigest      // ownedFields
	// DigestAnnotation, when hasDigest: in sha256 when it is one of ours
	// ("sha256:" and 64 hex digits, a third of its string), else in
	// digestText.
	sha256     [sha256.Size]byte
	digestText *string
	hasDigest  bool
	hasSHA256  bool
}

// newCachedMeta is what the cache keeps of m.
func newCachedMeta(m *metav1.PartialObjectMetadata, manager string, t *cacheTables) *cachedMeta {
	c := &cachedMeta{
		kind:            t.kind(m.TypeMeta),
		namespace:       t.intern(m.Namespace),
		name:            t.intern(m.Name),
		resourceVersion: m.ResourceVersion,
		deletion:        m.DeletionTimestamp,
		fields:          ownedFields(m, manager),
	}
	var digest string
	if digest, c.hasDigest = m.Annotations[DigestAnnotation]; c.hasDigest {
		if c.sha256, c.hasSHA256 = parseSHA256(digest); !c.hasSHA256 {
			c.digestText = &digest
		}
	}
	if owner, ok := m.Labels[OwnerLabel]; ok {
		c.labels = t.owner(owner)
	}
	return c
}

// digest is the DigestAnnotation's value.
func (c *cachedMeta) digest() string {
	if !c.hasSHA256 {
		if c.digestText == nil {
			return ""
		}
		return *c.digestText
	}
	return sha256Prefix + hex.EncodeToString(c.sha256[:])
}

const sha256Prefix = "sha256:"

// parseSHA256 reads a digest as the engine writes it: "sha256:" and the
// sum in lower-case hex, which digest spells back the same.
func parseSHA256(s string) (sum [sha256.Size]byte, ok bool) {
	hexSum, found := strings.CutPrefix(s, sha256Prefix)
	if !found || len(hexSum) != 2*sha256.Size {
		return sum, false
	}
	for i := range sum {
		hi, lo := fromHex(hexSum[2*i]), fromHex(hexSum[2*i+1])
		if hi < 0 || lo < 0 {
			return sum, false
		}
		sum[i] = byte(hi<<4 | lo)
	}
	return sum, true
}

// fromHex is the value of a lower-case hex digit, or -1.
func fromHex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// metadata is c as the PartialObjectMetadata it stands for.
func (c *cachedMeta) metadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: c.namespace, Name: c.name, ResourceVersion: c.resourceVersion,
		Labels: maps.Clone(c.labels), Annotations: c.GetAnnotations(),
	}}
	if c.kind != nil {
		m.APIVersion, m.Kind = c.kind.gvk.ToAPIVersionAndKind()
	}
	if c.deletion != nil {
		m.DeletionTimestamp = c.deletion.DeepCopy()
	}
	return m
}

// DeepCopyObject returns c as a PartialObjectMetadata of its own.
func (c *cachedMeta) DeepCopyObject() runtime.Object { return c.metadata() }

func (c *cachedMeta) GetObjectKind() schema.ObjectKind {
	if c.kind == nil {
		return schema.EmptyObjectKind
	}
	return c.kind
}

func (c *cachedMeta) GetNamespace() string                  { return c.namespace }
func (c *cachedMeta) GetName() string                       { return c.name }
func (c *cachedMeta) GetResourceVersion() string            { return c.resourceVersion }
func (c *cachedMeta) GetDeletionTimestamp() *metav1.Time    { return c.deletion }
func (c *cachedMeta) GetLabels() map[string]string          { return c.labels }
func (c *cachedMeta) GetGenerateName() string               { return "" }
func (c *cachedMeta) GetUID() types.UID                     { return "" }
func (c *cachedMeta) GetGeneration() int64                  { return 0 }
func (c *cachedMeta) GetSelfLink() string                   { return "" }
func (c *cachedMeta) GetCreationTimestamp() metav1.Time     { return metav1.Time{} }
func (c *cachedMeta) GetDeletionGracePeriodSeconds() *int64 { return nil }
func (c *cachedMeta) GetFinalizers() []string               { return nil }
func (c *cachedMeta) GetOwnerReferences() []metav1.OwnerReference {
	return nil
}
func (c *cachedMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// GetAnnotations are the digest annotation and, under cachedFieldsKey,
// the digest of our fields, in a map of the caller's.
func (c *cachedMeta) GetAnnotations() map[string]string {
	a := map[string]string{cachedFieldsKey: c.fields.String()}
	if c.hasDigest {
		a[DigestAnnotation] = c.digest()
	}
	return a
}

func (c *cachedMeta) SetNamespace(string)                          {}
func (c *cachedMeta) SetName(string)                               {}
func (c *cachedMeta) SetGenerateName(string)                       {}
func (c *cachedMeta) SetUID(types.UID)                             {}
func (c *cachedMeta) SetResourceVersion(string)                    {}
func (c *cachedMeta) SetGeneration(int64)                          {}
func (c *cachedMeta) SetSelfLink(string)                           {}
func (c *cachedMeta) SetCreationTimestamp(metav1.Time)             {}
func (c *cachedMeta) SetDeletionTimestamp(*metav1.Time)            {}
func (c *cachedMeta) SetDeletionGracePeriodSeconds(*int64)         {}
func (c *cachedMeta) SetLabels(map[string]string)                  {}
func (c *cachedMeta) SetAnnotations(map[string]string)             {}
func (c *cachedMeta) SetFinalizers([]string)                       {}
func (c *cachedMeta) SetOwnerReferences([]metav1.OwnerReference)   {}
func (c *cachedMeta) SetManagedFields([]metav1.ManagedFieldsEntry) {}

// sharedKind is the kind of the cached objects of one informer, shared
// by them all: read-only.
type sharedKind struct{ gvk schema.GroupVersionKind }

func (k *sharedKind) GroupVersionKind() schema.GroupVersionKind   { return k.gvk }
func (k *sharedKind) SetGroupVersionKind(schema.GroupVersionKind) {}

// cacheTables hold what the managed cache's objects share: the label
// set of each owner and each kind. Past maxShared entries of either
// (objects others labelled at will) each object gets its own.
type cacheTables struct {
	mu      sync.Mutex
	owners  map[string]map[string]string
	kinds   map[metav1.TypeMeta]*sharedKind
	strings map[string]string // namespaces and names
}

const (
	maxShared  = 4096
	maxStrings = 16384
)

func newCacheTables() *cacheTables {
	return &cacheTables{owners: map[string]map[string]string{}, kinds: map[metav1.TypeMeta]*sharedKind{}, strings: map[string]string{}}
}

// intern is s, shared with the objects that have the same string. Past
// maxStrings of them each object keeps its own.
func (t *cacheTables) intern(s string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.strings[s]; ok {
		return shared
	}
	if len(t.strings) < maxStrings {
		t.strings[s] = s
	}
	return s
}

func (t *cacheTables) owner(owner string) map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if set, ok := t.owners[owner]; ok {
		return set
	}
	set := map[string]string{OwnerLabel: owner}
	if len(t.owners) < maxShared {
		t.owners[owner] = set
	}
	return set
}

func (t *cacheTables) kind(tm metav1.TypeMeta) *sharedKind {
	if tm.APIVersion == "" && tm.Kind == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if k, ok := t.kinds[tm]; ok {
		return k
	}
	k := &sharedKind{gvk: schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)}
	if len(t.kinds) < maxShared {
		t.kinds[tm] = k
	}
	return k
}

// managedCache is the cache of managed objects, whose entries it also
// reads without the copy a cache read makes (meta). A read of a kind it
// does not watch (see unwatchable.go), or whose watch has not synced
// within syncWait of its start, fails at once with errNotWatched: its
// callers then read from the API server.
type managedCache struct {
	cache.Cache
	scheme *runtime.Scheme
	// watching says since when a watch runs.
	watching func(watchKey) (time.Time, bool)
	// indexers are the stores of the synced metadata informers, by kind.
	indexers sync.Map
}

// Get reads obj from the cache, once its kind's watch has synced.
func (c *managedCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return err
	}
	purpose := watchManaged
	if _, whole := obj.(*unstructured.Unstructured); whole {
		purpose = watchHealth
	}
	since, ok := c.watching(watchKey{gvk: gvk, purpose: purpose})
	if !ok {
		return errNotWatched
	}
	if err := awaitSync(ctx, c.Cache, obj, since); err != nil {
		return err
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

// readCachedMeta reads what the managed cache keeps of the object of kind
// gvk at key, without the copy a cache read makes: a cachedMeta is
// read-only. A steady resync of a fan-out reads every copy twice (drift,
// health), and the copies would be most of what it allocates. found is
// false when the cache does not hold the object; ok is false when reader
// is not the managed cache (a remote cluster's reader), its informer of
// the kind is not synced yet, or it keeps something else of the kind:
// read through reader then.
func readCachedMeta(ctx context.Context, reader client.Reader, gvk schema.GroupVersionKind, key client.ObjectKey) (m *cachedMeta, found, ok bool) {
	c, is := reader.(*managedCache)
	if !is {
		return nil, false, false
	}
	indexer, is := c.indexers.Load(gvk)
	if _, watched := c.watching(watchKey{gvk: gvk, purpose: watchManaged}); !watched {
		return nil, false, false
	}
	if !is {
		probe := &metav1.PartialObjectMetadata{}
		probe.SetGroupVersionKind(gvk)
		inf, err := c.GetInformer(ctx, probe, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, false, false
		}
		shared, is := inf.(toolscache.SharedIndexInformer)
		if !is || !shared.HasSynced() {
			return nil, false, false
		}
		indexer, _ = c.indexers.LoadOrStore(gvk, shared.GetIndexer())
	}
	storeKey := key.Name
	if key.Namespace != "" {
		storeKey = key.Namespace + "/" + key.Name
	}
	item, exists, err := indexer.(toolscache.Indexer).GetByKey(storeKey)
	switch {
	case err != nil:
		return nil, false, false
	case !exists:
		return nil, false, true
	}
	m, is = item.(*cachedMeta)
	return m, is, is
}
