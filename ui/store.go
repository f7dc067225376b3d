package ui

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/view"
)

// row is one ManifestSync of the overview, computed once per change of it
// (not per request), so that a page of a thousand is quick to serve.
type row struct {
	view.Summary
	// Health is Healthy, Progressing, Degraded, Unknown, or "" when there
	// is no Healthy condition yet.
	Health string
	// Drifted: some object of its inventory drifted or is missing.
	Drifted bool
	// key is "namespace/name".
	key string
	// text is what the search matches, lower case.
	text string
}

// rowOf is the overview row of ms.
func rowOf(ms *v1alpha1.ManifestSync) row {
	r := row{Summary: view.Summarize(ms), Health: healthOf(ms), key: ms.Namespace + "/" + ms.Name}
	if entries, err := ms.InventoryEntries(); err == nil {
		for _, e := range entries {
			if e.Drifted || e.Missing {
				r.Drifted = true
				break
			}
		}
	}
	r.text = strings.ToLower(strings.Join([]string{r.Namespace, r.Name, r.Reason, r.Message, r.Revision}, "\x00"))
	return r
}

// healthOf is the Healthy condition as one word: Healthy when True,
// Progressing or Degraded by its reason, else the worst of the targets'.
func healthOf(ms *v1alpha1.ManifestSync) string {
	c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionHealthy)
	if c == nil {
		return ""
	}
	switch {
	case c.Status == metav1.ConditionTrue:
		return string(v1alpha1.HealthHealthy)
	case c.Reason == v1alpha1.ReasonProgressing:
		return string(v1alpha1.HealthProgressing)
	case c.Reason == v1alpha1.ReasonHealthCheckFailed:
		return string(v1alpha1.HealthDegraded)
	}
	worst := ""
	rank := map[string]int{"": 0, string(v1alpha1.HealthHealthy): 1, string(v1alpha1.HealthUnknown): 2,
		string(v1alpha1.HealthProgressing): 3, string(v1alpha1.HealthDegraded): 4}
	for _, t := range ms.Status.Targets {
		if rank[string(t.Health)] > rank[worst] {
			worst = string(t.Health)
		}
	}
	if worst == "" || worst == string(v1alpha1.HealthHealthy) {
		return string(v1alpha1.HealthUnknown)
	}
	return worst
}

// change is what the live stream sends: an object that changed.
type change struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// seq is its number in the store (the event's id).
	seq uint64
}

// store holds the rows of every ManifestSync the shared watch sees and
// passes each change on to the open streams.
type store struct {
	mu     sync.RWMutex
	rows   map[string]row
	sorted []row // rows by key; nil when stale
	synced bool
	// scope is the one namespace the own watch sees, when it may not see
	// them all (ModeLocal); "" for all.
	scope string

	subMu sync.Mutex
	subs  map[*subscriber]struct{}
	// epoch tells this store's sequence numbers from those of another
	// process (a restarted server); seq numbers the changes published;
	// recent holds the last recentChanges of them, so that a stream opened
	// after its page was read starts with what changed in between.
	epoch  string
	seq    uint64
	recent []change
}

// recentChanges is how many changes a stream can catch up on; a page
// older than that is told that something changed.
const recentChanges = 256

// cursor is a point in a store's changes: "EPOCH-SEQ". A page carries the
// cursor read before its data; its stream sends what came after.
type cursor struct {
	epoch string
	seq   uint64
}

func (c cursor) String() string { return c.epoch + "-" + strconv.FormatUint(c.seq, 10) }

// parseCursor reads a cursor; ok is false for anything else.
func parseCursor(s string) (cursor, bool) {
	epoch, n, ok := strings.Cut(s, "-")
	if !ok || epoch == "" {
		return cursor{}, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return cursor{}, false
	}
	return cursor{epoch: epoch, seq: seq}, true
}

// subscriber is one open stream: changes are queued in ch; a full queue
// drops them and sets lost, so that the stream still says something
// changed.
type subscriber struct {
	ch   chan change
	mu   sync.Mutex
	lost bool
}

func newStore() *store {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &store{rows: map[string]row{}, subs: map[*subscriber]struct{}{}, epoch: hex.EncodeToString(b[:])}
}

// now is the cursor of the last change published.
func (st *store) now() cursor {
	st.subMu.Lock()
	defer st.subMu.Unlock()
	return cursor{epoch: st.epoch, seq: st.seq}
}

func (st *store) set(ms *v1alpha1.ManifestSync) {
	r := rowOf(ms)
	st.mu.Lock()
	st.rows[r.key] = r
	st.sorted = nil
	st.mu.Unlock()
	st.publish(change{Kind: "ManifestSync", Namespace: ms.Namespace, Name: ms.Name})
}

func (st *store) remove(ns, name string) {
	st.mu.Lock()
	delete(st.rows, ns+"/"+name)
	st.sorted = nil
	st.mu.Unlock()
	st.publish(change{Kind: "ManifestSync", Namespace: ns, Name: name})
}

// watchScope is the one namespace the watch sees, or "" for all.
func (st *store) watchScope() string {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.scope
}

// list is every row, sorted by namespace and name; it must not be changed.
func (st *store) list() (rows []row, synced bool) {
	st.mu.RLock()
	rows, synced = st.sorted, st.synced
	st.mu.RUnlock()
	if rows != nil {
		return rows, synced
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sorted == nil {
		st.sorted = make([]row, 0, len(st.rows))
		for _, r := range st.rows {
			st.sorted = append(st.sorted, r)
		}
		slices.SortFunc(st.sorted, func(a, b row) int { return strings.Compare(a.key, b.key) })
	}
	return st.sorted, st.synced
}

// subscribe opens a stream's queue. With a cursor (ok) it also returns
// the changes published after it, and lost when they are not all known
// any more (too old, or a cursor of another process).
func (st *store) subscribe(since cursor, ok bool) (sub *subscriber, missed []change, lost bool) {
	sub = &subscriber{ch: make(chan change, 64)}
	st.subMu.Lock()
	defer st.subMu.Unlock()
	st.subs[sub] = struct{}{}
	if !ok {
		return sub, nil, false
	}
	if since.epoch != st.epoch || since.seq > st.seq {
		return sub, nil, true
	}
	if since.seq == st.seq {
		return sub, nil, false
	}
	if len(st.recent) == 0 || st.recent[0].seq > since.seq+1 {
		return sub, nil, true
	}
	for _, c := range st.recent {
		if c.seq > since.seq {
			missed = append(missed, c)
		}
	}
	return sub, missed, false
}

func (st *store) unsubscribe(sub *subscriber) {
	st.subMu.Lock()
	delete(st.subs, sub)
	st.subMu.Unlock()
}

// publish queues c on every stream without waiting for any.
func (st *store) publish(c change) {
	st.subMu.Lock()
	defer st.subMu.Unlock()
	st.seq++
	c.seq = st.seq
	if len(st.recent) == recentChanges {
		copy(st.recent, st.recent[1:])
		st.recent = st.recent[:recentChanges-1]
	}
	st.recent = append(st.recent, c)
	for sub := range st.subs {
		select {
		case sub.ch <- c:
		default:
			sub.mu.Lock()
			sub.lost = true
			sub.mu.Unlock()
		}
	}
}

// handler feeds the store from an informer of ManifestSyncs.
func (st *store) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ms, ok := obj.(*v1alpha1.ManifestSync); ok {
				st.set(ms)
			}
		},
		UpdateFunc: func(old, obj any) {
			ms, ok := obj.(*v1alpha1.ManifestSync)
			if !ok {
				return
			}
			// A resync hands the same object again: nothing changed, and
			// no open page need refetch.
			if o, ok := old.(*v1alpha1.ManifestSync); ok && o.ResourceVersion == ms.ResourceVersion {
				return
			}
			st.set(ms)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ms, ok := obj.(*v1alpha1.ManifestSync); ok {
				st.remove(ms.Namespace, ms.Name)
			}
		},
	}
}

// runWatch hooks the store into Options.Cache's informer of
// ManifestSyncs, or starts an informer of its own with Options.Config (in
// ModeLocal only in Options.Namespace when the user may not list them
// cluster-wide), and keeps it until ctx ends.
func (s *Server) runWatch(ctx context.Context) error {
	c := s.opts.Cache
	own := c == nil
	if own {
		opts := cache.Options{Scheme: s.scheme, Mapper: s.mapper, HTTPClient: s.httpClient,
			DefaultTransform: cache.TransformStripManagedFields()}
		if s.opts.Selector != nil && !s.opts.Selector.Empty() {
			opts.ByObject = map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Label: s.opts.Selector}}
		}
		if ns := s.watchNamespace(ctx); ns != "" {
			opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
			s.store.mu.Lock()
			s.store.scope = ns
			s.store.mu.Unlock()
		}
		var err error
		if c, err = cache.New(s.opts.Config, opts); err != nil {
			return fmt.Errorf("ui: cache of ManifestSyncs: %w", err)
		}
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.ManifestSync{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("ui: informer of ManifestSyncs: %w", err)
	}
	reg, err := inf.AddEventHandler(s.store.handler())
	if err != nil {
		return fmt.Errorf("ui: informer of ManifestSyncs: %w", err)
	}
	errc := make(chan error, 1)
	if own {
		go func() { errc <- c.Start(ctx) }()
	}
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			s.store.mu.Lock()
			s.store.synced = true
			s.store.mu.Unlock()
			s.log.V(1).Info("the watch of ManifestSyncs has synced")
		}
	}()
	select {
	case <-ctx.Done():
		_ = inf.RemoveEventHandler(reg)
		if own {
			if err := <-errc; err != nil {
				return fmt.Errorf("ui: cache of ManifestSyncs: %w", err)
			}
		}
		return nil
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("ui: cache of ManifestSyncs: %w", err)
		}
		<-ctx.Done()
		return nil
	}
}

// watchNamespace is "" when the own watch may list ManifestSyncs in every
// namespace, else (ModeLocal's fallback when the API server forbids it)
// Options.Namespace, or "default" when there is none.
func (s *Server) watchNamespace(ctx context.Context) string {
	if s.opts.Mode != ModeLocal {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var l v1alpha1.ManifestSyncList
	err := s.base.List(ctx, &l, client.Limit(1))
	if err == nil || !apierrors.IsForbidden(err) {
		return ""
	}
	ns := s.opts.Namespace
	if ns == "" {
		ns = "default"
	}
	s.log.Info("cannot list ManifestSyncs in every namespace; showing one namespace", "namespace", ns, "error", err.Error())
	return ns
}
