package controller

import (
	"bytes"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/engine/redact"
)

// syncState is what the reconciler remembers of one ManifestSync between
// reconciles, in memory: the source snapshots it read and, per target, what
// it applied last. It is what makes steady state free: when the inputs and
// every applied object's resourceVersion are unchanged, nothing is sent.
// Losing it (a restart) costs one full apply.
type syncState struct {
	// mu serialises reconciles of one ManifestSync, including direct calls
	// of Reconcile beside the controller's own.
	mu      sync.Mutex
	sources map[objectRef]*engine.Snapshot
	// sets are the objects each object set source read last, by source
	// name: their bodies stay in sources while some set holds them.
	sets map[string]map[objectRef]bool
	// sourceNames are the names of the sources read last, whose metric
	// series go when they leave the spec.
	sourceNames []string
	targets     map[string]*targetRecord // by TargetResult.ID()
	// eval is the last successful evaluation.
	eval *lastEval
	// written is the ManifestSync as our last write returned it. The
	// cache may not show that write yet; since only we write status and
	// the finalizer, what we wrote last is what the server has.
	written *v1alpha1.ManifestSync
	// transientFailures counts the syncs in a row that failed for a cause
	// that ends by itself, for their retry's backoff (retrySoon).
	transientFailures int
	// health judges the objects, from spec.healthChecks of the generation
	// healthGeneration.
	health           *health.Checker
	healthGeneration int64
}

// catchUp brings ms, read from a cache that may lag behind our own writes,
// up to date with them: our finalizer and our last status, as long as it is
// the same object at the same generation.
func (st *syncState) catchUp(ms *v1alpha1.ManifestSync) {
	w := st.written
	if w == nil || w.UID != ms.UID || w.Generation != ms.Generation {
		return
	}
	ms.Status = *w.Status.DeepCopy()
	if controllerutil.ContainsFinalizer(w, Finalizer) {
		controllerutil.AddFinalizer(ms, Finalizer)
	}
}

// wroteInventory reports whether ms's gzipped inventory is the one our
// last status write left: it read back whole then, and is not read
// through again to be known sound (with a fan-out, tens of thousands of
// entries at every sync).
func (st *syncState) wroteInventory(ms *v1alpha1.ManifestSync) bool {
	w := st.written
	return w != nil && w.UID == ms.UID && len(ms.Status.Inventory) == 0 && len(ms.Status.InventoryGzip) > 0 &&
		bytes.Equal(w.Status.InventoryGzip, ms.Status.InventoryGzip)
}

// wrote remembers ms as a write returned it.
func (st *syncState) wrote(ms *v1alpha1.ManifestSync) {
	st.written = ms.DeepCopy()
}

// targetRecord is one target's last successful apply.
type targetRecord struct {
	revision   string // Result.Revision
	generation int64  // the ManifestSync's
	digest     string // TargetResult.Digest
	objects    []appliedObject
	// partial is set when some objects failed or are in conflict, or a
	// wave was not Current yet: the target is retried, and the record
	// only spares the retry the objects that were applied and have not
	// changed since.
	partial bool
	// since is when this desired state was first applied: spec.timeout
	// counts from there.
	since time.Time
	// healthy is set when every object was Current at the last sync.
	healthy bool
}

// complete reports whether r is a complete record of t's desired state
// at revision and generation: t's sync only checks drift, from r.
func (r *targetRecord) complete(revision string, generation int64, t *engine.TargetResult) bool {
	return r != nil && !r.partial && r.revision == revision && r.generation == generation && r.digest == t.Digest
}

// names reports whether r has an entry for the object id.
func (r *targetRecord) names(id v1alpha1.ObjectID) bool {
	return slices.ContainsFunc(r.objects, func(o appliedObject) bool { return o.item.id == id })
}

// appliedObject is an object as it was after the last apply. Objects that
// are not ours (kept as they were, or in conflict) have no resourceVersion
// and are not watched for drift.
type appliedObject struct {
	// item is the object's inventory entry as the apply left it: its
	// fields are the digest of the fields we owned after it
	// (ownedFields), whose change is drift; missing and drifted are set
	// when someone else deleted or changed it and the drift policy left
	// it so (a missing object stays in the inventory).
	item            inventoryItem
	resourceVersion string
	// digest is the sum of the desired object's digest that was applied.
	digest digestSum
}

// digestSum stands for a desired object's digest in a record, which
// keeps one per object (tens of thousands in a fan-out) only to compare
// them: 8 bytes, not the 71 of "sha256:<hex>". Zero is no digest.
type digestSum uint64

var digestSeed = maphash.MakeSeed()

func sumOf(digest string) digestSum {
	if digest == "" {
		return 0
	}
	return digestSum(maphash.String(digestSeed, digest) | 1)
}

// states holds the syncState of every ManifestSync seen.
type states struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*syncState
}

func (s *states) get(key types.NamespacedName) *syncState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[types.NamespacedName]*syncState{}
	}
	st := s.m[key]
	if st == nil {
		st = &syncState{sources: map[objectRef]*engine.Snapshot{}, targets: map[string]*targetRecord{}}
		s.m[key] = st
	}
	return st
}

func (s *states) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// lastEval is an evaluation and what it was computed from. Its result
// is let go (nil) when inputs change, before the next evaluation, so that
// two evaluations of a large fan-out are never held at once; its Secrets
// stay known to the redactor.
type lastEval struct {
	key      evalKey
	result   *engine.Result
	redactor *redact.Redactor
}

// evalKey is everything an evaluation depends on: the spec (by
// generation), the revision of every source, and the namespaces a
// selector may pick.
type evalKey struct {
	uid        types.UID
	generation int64
	revisions  map[string]string
	namespaces []engine.Namespace
	// clusterNamespaces are those of remote clusters, by engine.ClusterID.
	clusterNamespaces map[string][]engine.Namespace
	// capabilities is a digest of what charts see of the clusters
	// (Reconciler.chartOptions).
	capabilities string
}

func (k evalKey) equal(o evalKey) bool {
	return k.uid == o.uid && k.generation == o.generation &&
		maps.Equal(k.revisions, o.revisions) &&
		sameNamespaces(k.namespaces, o.namespaces) &&
		maps.EqualFunc(k.clusterNamespaces, o.clusterNamespaces, sameNamespaces) &&
		k.capabilities == o.capabilities
}

func sameNamespaces(a, b []engine.Namespace) bool {
	return slices.EqualFunc(a, b, func(a, b engine.Namespace) bool {
		return a.Name == b.Name && maps.Equal(a.Labels, b.Labels)
	}) && (a == nil) == (b == nil)
}

// redactor knows the Secret values to mask in what a sync reports: the
// evaluation's, when there was one, else the last successful one's, else
// those of the sources last read.
func (st *syncState) redactor(res *engine.Result) *redact.Redactor {
	switch {
	case res != nil:
		return res.Redactor
	case st.eval != nil:
		return st.eval.redactor
	}
	snaps := make(map[string]*engine.Snapshot, len(st.sources))
	for ref, s := range st.sources {
		snaps[ref.cluster+"|"+ref.String()] = s // a remote object may share a local one's name
	}
	return engine.SnapshotRedactor(snaps)
}
