package shard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Short leases, so that the expiry of a dead replica is seen in seconds,
// yet long enough that a loaded machine's API server answers a renewal in
// time (a replica fences after 7s without one: at a load of 17 on 2 cores,
// with make test's other package beside it, the API server once answered
// none for 4s).
const (
	testLease  = 10 * time.Second
	testRenew  = 300 * time.Millisecond
	testMargin = 3 * time.Second
)

// inflight records which replica reconciles which ManifestSync, and counts
// two replicas reconciling one at once.
type inflight struct {
	mu      sync.Mutex
	by      map[string]string
	runs    map[string]int // reconciles by replica
	doubles []string
}

func (f *inflight) begin(key, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if other, ok := f.by[key]; ok && other != id {
		f.doubles = append(f.doubles, fmt.Sprintf("%s reconciled by %s and %s at once", key, other, id))
	}
	f.by[key] = id
	f.runs[id]++
}

func (f *inflight) end(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.by, key)
}

// replica is an in-process replica: a manager whose ManifestSync cache
// holds only its share, a Member and a Replica around a reconciler that
// records what it reconciles.
type replica struct {
	id     string
	member *Member
	cancel context.CancelFunc
	done   chan struct{}
}

// started are the replicas of the running test, by ID.
var started sync.Map

// fencedOf names a replica of ids whose fence fell, or "".
func fencedOf(ids []string) string {
	for _, id := range ids {
		if r, ok := started.Load(id); ok {
			select {
			case <-r.(*replica).member.Fenced():
				return id
			default:
			}
		}
	}
	return ""
}

// startReplica starts replica id; its acknowledgements go to log when
// not nil.
func startReplica(t *testing.T, ns, id string, f *inflight, log *patchLog) *replica {
	t.Helper()
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Label: OwnerSelector(id)}}},
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{Client: env.Client, Namespace: ns, ID: id, LeaseDuration: testLease, RenewDeadline: testLease - testMargin, RetryPeriod: testRenew}
	rep := &Replica{Reader: mgr.GetCache(), Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ID: id, Member: m,
		Selector: labels.SelectorFromSet(labels.Set{"test": ns})}
	if log != nil {
		rep.Client = &recordingClient{Client: rep.Client, log: log}
	}
	if err := mgr.Add(rep); err != nil {
		t.Fatal(err)
	}
	// As the reconciler does: a ManifestSync gone from the cache (deleted,
	// or moved away) is forgotten, without a write; one found is synced.
	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if err := mgr.GetCache().Get(ctx, req.NamespacedName, &v1alpha1.ManifestSync{}); err != nil {
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		f.begin(req.String(), id)
		defer f.end(req.String())
		time.Sleep(2 * time.Millisecond)
		return reconcile.Result{}, nil
	})
	err = ctrl.NewControllerManagedBy(mgr).Named("shard-"+id).
		For(&v1alpha1.ManifestSync{}, builder.WithPredicates(rep.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(rep.Wrap(inner))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, member: m, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = m.Run(ctx) }()
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("replica %s: %v", id, err)
		}
	}()
	go func() { wg.Wait(); close(r.done) }()
	t.Cleanup(r.stop)
	started.Store(id, r)
	return r
}

// stop kills the replica as kill -9 would, as far as the API server sees:
// its Lease stays, unrenewed, until it expires.
func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// transition is one change of a ManifestSync's shard labels, as a watch
// saw it.
type transition struct {
	key                string
	from, to           string // owner before and after
	drainFrom, drainTo string
	at                 time.Time
}

// labelWatch records every change of the shard labels of the namespace's
// ManifestSyncs.
type labelWatch struct {
	mu    sync.Mutex
	last  map[string][2]string // owner, drain
	moves []transition
	lost  int // watch errors
}

func watchLabels(t *testing.T, ns string) *labelWatch {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	lw := &labelWatch{last: map[string][2]string{}}
	var list v1alpha1.ManifestSyncList
	if err := wc.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &v1alpha1.ManifestSyncList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					lw.mu.Lock()
					lw.lost++ // the record has a gap: check fails
					lw.mu.Unlock()
					continue
				}
				ms, ok := ev.Object.(*v1alpha1.ManifestSync)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				rv = ms.ResourceVersion
				lw.see(ms)
			}
		}
	}()
	return lw
}

func (lw *labelWatch) see(ms *v1alpha1.ManifestSync) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	k := ms.Namespace + "/" + ms.Name
	now := [2]string{ms.Labels[OwnerLabel], ms.Labels[DrainLabel]}
	prev := lw.last[k]
	if now != prev {
		lw.moves = append(lw.moves, transition{key: k, from: prev[0], to: now[0], drainFrom: prev[1], drainTo: now[1], at: time.Now()})
	}
	lw.last[k] = now
}

// check fails t for every owner change that skipped the drain handshake,
// unless the old owner is in dead (its Lease expired at the time given);
// it returns the changes of owner away from each dead replica.
func (lw *labelWatch) check(t *testing.T, dead map[string]time.Time) map[string][]transition {
	t.Helper()
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.lost > 0 {
		t.Errorf("the label watch lost events %d times: its record has gaps", lw.lost)
	}
	fromDead := map[string][]transition{}
	bad := 0
	for _, m := range lw.moves {
		switch {
		case m.from == m.to:
		case m.from == "":
		case m.to == "":
			// An acknowledgement: the owner let go after a drain.
			if m.drainFrom == "" {
				bad++
				t.Errorf("%s: owner %s removed without a drain", m.key, m.from)
			}
		default:
			if _, ok := dead[m.from]; !ok {
				bad++
				t.Errorf("%s: moved from live %s to %s without a drain", m.key, m.from, m.to)
			}
			fromDead[m.from] = append(fromDead[m.from], m)
		}
		if bad > 10 {
			t.Fatal("too many")
		}
	}
	return fromDead
}

// owners lists the namespace's ManifestSyncs: owner by key, and how many
// are draining.
func owners(t *testing.T, ns string) (map[string]string, int) {
	t.Helper()
	var list v1alpha1.ManifestSyncList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	draining := 0
	for _, ms := range list.Items {
		out[ms.Namespace+"/"+ms.Name] = ms.Labels[OwnerLabel]
		if ms.Labels[DrainLabel] != "" {
			draining++
		}
	}
	return out, draining
}

// converge waits until every ManifestSync is owned by one of ids, none
// drains and every replica holds within Bounds; it returns the owners.
func converge(t *testing.T, ns string, total int, ids ...string) map[string]string {
	t.Helper()
	lo, hi := Bounds(total, len(ids))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		own, draining := owners(t, ns)
		l := map[string]int{}
		for _, o := range own {
			l[o]++
		}
		ok := draining == 0 && len(own) == total
		for _, id := range ids {
			ok = ok && l[id] >= lo && l[id] <= hi
		}
		ok = ok && len(l) == len(ids)
		if ok {
			return own
		}
		if time.Now().After(deadline) {
			t.Fatalf("not converged over %v: loads %v, %d draining", ids, l, draining)
		}
		if fenced := fencedOf(ids); fenced != "" {
			t.Fatalf("replica %s fenced itself: the API server did not answer its renewals in time (a loaded machine?)", fenced)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestSharder(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	const total = 1000
	lw := watchLabels(t, ns)
	f := &inflight{by: map[string]string{}, runs: map[string]int{}}

	var wg sync.WaitGroup
	errs := make(chan error, total)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += 8 {
				ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", i), Labels: map[string]string{"test": ns}},
					Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
				if err := env.Client.Create(context.Background(), ms); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating ManifestSyncs: %v", err)
	}

	// The ManifestSyncs of this test only: the other tests' stay in the
	// API server.
	s, err := NewSharder(env.Config, env.Scheme, env.Client, ns, labels.SelectorFromSet(labels.Set{"test": ns}))
	if err != nil {
		t.Fatal(err)
	}
	s.Resync = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	sdone := make(chan error, 1)
	go func() { sdone <- s.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-sdone })

	ids := []string{"r0", "r1", "r2", "r3", "r4"}
	reps := map[string]*replica{}
	reps["r0"] = startReplica(t, ns, "r0", f, nil)
	start := time.Now()
	converge(t, ns, total, "r0")
	t.Logf("1 replica: all assigned in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	reps["r1"] = startReplica(t, ns, "r1", f, nil)
	converge(t, ns, total, "r0", "r1")
	t.Logf("2 replicas: converged in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	reps["r2"] = startReplica(t, ns, "r2", f, nil)
	reps["r3"] = startReplica(t, ns, "r3", f, nil)
	four := converge(t, ns, total, ids[:4]...)
	t.Logf("4 replicas: converged in %s", time.Since(start).Round(time.Millisecond))

	// A fifth joins: about 1/5 move, all to it.
	reps["r4"] = startReplica(t, ns, "r4", f, nil)
	five := converge(t, ns, total, ids...)
	moved := 0
	for k, o := range five {
		if four[k] != o {
			moved++
			if o != "r4" {
				t.Errorf("%s moved from %s to %s when r4 joined", k, four[k], o)
			}
		}
	}
	if ideal := total / 5; float64(moved) > 1.3*float64(ideal) {
		t.Errorf("a fifth replica moved %d ManifestSyncs, want ≤ 1.3 x %d", moved, ideal)
	}
	t.Logf("the fifth replica's join moved %d ManifestSyncs (ideal %d)", moved, total/5)

	// r1 dies: its ManifestSyncs stay its own until its Lease expires,
	// then go to the others.
	reps["r1"].stop()
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: LeaseName("r1")}, &l); err != nil {
		t.Fatal(err)
	}
	expiry := l.Spec.RenewTime.Add(testLease)
	if wait := time.Until(expiry.Add(-300 * time.Millisecond)); wait > 0 {
		time.Sleep(wait)
		own, _ := owners(t, ns)
		held := 0
		for k, o := range five {
			if o == "r1" && own[k] == "r1" {
				held++
			} else if o == "r1" {
				t.Errorf("%s left dead r1 (for %q) before its Lease expired", k, own[k])
			}
		}
		if held == 0 {
			t.Error("r1 held nothing")
		}
	} else {
		t.Logf("the check before expiry was too late to run (%s late)", -wait)
	}
	after := converge(t, ns, total, "r0", "r2", "r3", "r4")
	for k, o := range after {
		if five[k] != "r1" && five[k] != o {
			t.Errorf("%s moved from live %s to %s when r1 died", k, five[k], o)
		}
	}
	time.Sleep(500 * time.Millisecond) // the watch catches up
	fromDead := lw.check(t, map[string]time.Time{"r1": expiry})
	if len(fromDead["r1"]) == 0 {
		t.Error("no ManifestSync moved from dead r1")
	}
	for _, m := range fromDead["r1"] {
		if m.at.Before(expiry) {
			t.Errorf("%s moved from dead r1 at %s, before its Lease expired at %s", m.key, m.at, expiry)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.doubles {
		t.Error(d)
	}
	for _, id := range ids {
		if f.runs[id] == 0 {
			t.Errorf("replica %s reconciled nothing", id)
		}
	}
	t.Logf("reconciles by replica: %v", f.runs)
}

// TestSharderSelector: with --watch-label-selector the sharder assigns
// only the ManifestSyncs of its selector, and leaves the others unowned
// (another release's).
func TestSharderSelector(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	mk := func(name string, labels map[string]string) *v1alpha1.ManifestSync {
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
		if err := env.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ms) })
		return ms
	}
	ours := []*v1alpha1.ManifestSync{mk("a1", map[string]string{"team": "a"}), mk("a2", map[string]string{"team": "a"})}
	theirs := mk("b1", map[string]string{"team": "b"})
	m := &Member{Client: env.Client, Namespace: ns, ID: "sel-1", LeaseDuration: testLease, RenewDeadline: testLease - testMargin, RetryPeriod: testRenew}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = m.Run(mctx) }()
	sel, err := labels.Parse("team=a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSharder(env.Config, env.Scheme, env.Client, ns, sel)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- s.Start(sctx) }()
	defer func() { scancel(); <-sdone }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, ms := range ours {
			var got v1alpha1.ManifestSync
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), &got); err != nil {
				t.Fatal(err)
			}
			if got.Labels[OwnerLabel] == "sel-1" {
				n++
			}
		}
		if n == len(ours) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d ManifestSyncs of the selector assigned", n, len(ours))
		}
	}
	time.Sleep(time.Second) // a pass that would have labelled it too
	var got v1alpha1.ManifestSync
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), &got); err != nil {
		t.Fatal(err)
	}
	if o, ok := got.Labels[OwnerLabel]; ok {
		t.Errorf("a ManifestSync outside the selector was assigned to %q", o)
	}
}

// patchLog records the label patches of a client: what each was, for
// which ManifestSync, when it was sent and when it returned.
type patchLog struct {
	mu   sync.Mutex
	recs []patchRec
}

type patchRec struct {
	key, kind  string // kind: assign, take, drain or ack
	sent, done time.Time
	err        error
}

// ok are the successful patches of kind, by ManifestSync.
func (l *patchLog) ok(kind string) map[string][]patchRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]patchRec{}
	for _, r := range l.recs {
		if r.kind == kind && r.err == nil {
			out[r.key] = append(out[r.key], r)
		}
	}
	return out
}

// recordingClient records its patches into log.
type recordingClient struct {
	client.Client
	log *patchLog
}

func (c *recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	data, _ := patch.Data(obj)
	kind := "ack" // the replica's: removes both labels
	switch {
	case patch.Type() == types.MergePatchType:
		kind = "assign"
	case strings.Contains(string(data), `"op":"replace"`):
		kind = "take"
	case strings.Contains(string(data), `"op":"add"`):
		kind = "drain"
	}
	sent := time.Now()
	err := c.Client.Patch(ctx, obj, patch, opts...)
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	c.log.recs = append(c.log.recs, patchRec{key: obj.GetNamespace() + "/" + obj.GetName(), kind: kind, sent: sent, done: time.Now(), err: err})
	return err
}

// TestSharderHandoverGap: a ManifestSync its owner let go of gets its new
// owner no earlier than the handover gap after: after a drain's
// acknowledgement (the sharder's label write sent at least the gap after
// the acknowledgement was sent), and after a replica that stopped deleted
// its Lease; a new ManifestSync is assigned at once. The label watch
// confirms the order: every acknowledgement is followed by the new owner.
func TestSharderHandoverGap(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	const total = 40
	ctx := context.Background()
	lw := watchLabels(t, ns)
	f := &inflight{by: map[string]string{}, runs: map[string]int{}}
	create := func(name string) {
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"test": ns}},
			Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
		if err := env.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	for i := range total {
		create(fmt.Sprintf("app-%d", i))
	}
	s, err := NewSharder(env.Config, env.Scheme, env.Client, ns, labels.SelectorFromSet(labels.Set{"test": ns}))
	if err != nil {
		t.Fatal(err)
	}
	sharderLog, acks := &patchLog{}, &patchLog{}
	s.Client = &recordingClient{Client: env.Client, log: sharderLog}
	gap := DefaultHandoverGap
	sctx, cancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- s.Start(sctx) }()
	t.Cleanup(func() { cancel(); <-sdone })

	startReplica(t, ns, "r0", f, acks)
	converge(t, ns, total, "r0")
	r1 := startReplica(t, ns, "r1", f, acks)
	converge(t, ns, total, "r0", "r1")

	// Each drain: the sharder's write of the new owner is sent no earlier
	// than the gap after the old owner's acknowledgement was sent. (The
	// sharder counts the gap from the pass that sees the acknowledgement,
	// after the API server stored it; the replica may get the answer to
	// its patch later still, on a loaded machine.)
	assigns := sharderLog.ok("assign")
	handovers := 0
	for key, as := range acks.ok("ack") {
		ack := as[len(as)-1]
		var first *patchRec
		for i := range assigns[key] {
			if a := &assigns[key][i]; a.sent.After(ack.sent) && (first == nil || a.sent.Before(first.sent)) {
				first = a
			}
		}
		if first == nil {
			t.Errorf("%s: acknowledged at %s, never assigned after", key, ack.done.Format(time.StampMilli))
			continue
		}
		handovers++
		if d := first.sent.Sub(ack.sent); d < gap {
			t.Errorf("%s: new owner written %s after the acknowledgement, want ≥ %s", key, d, gap)
		}
	}
	if handovers < total/4 {
		t.Fatalf("%d handovers by drain when r1 joined, want about %d", handovers, total/2)
	}
	// The watch saw each acknowledgement followed by the new owner, as
	// far apart as the gap give or take the watch's delays.
	time.Sleep(500 * time.Millisecond)
	lw.mu.Lock()
	acked, seen := map[string]time.Time{}, 0
	var closest time.Duration
	for _, m := range lw.moves {
		switch {
		case m.from != "" && m.to == "" && m.drainFrom != "":
			acked[m.key] = m.at
		case m.from == "" && m.to != "":
			if at, ok := acked[m.key]; ok {
				if d := m.at.Sub(at); seen == 0 || d < closest {
					closest = d
				}
				seen++
				delete(acked, m.key)
			}
		}
	}
	lw.mu.Unlock()
	if seen != handovers || len(acked) > 0 {
		t.Errorf("the watch saw %d acknowledgements followed by a new owner (%d not), the sharder's writes %d", seen, len(acked), handovers)
	}
	t.Logf("%d handovers by drain; in the watch the closest was %s after its acknowledgement", handovers, closest)

	// r1 stops and deletes its Lease: its ManifestSyncs go to r0 no
	// earlier than the gap after.
	own, _ := owners(t, ns)
	r1.stop()
	released := time.Now()
	if err := r1.member.Release(ctx); err != nil {
		t.Fatal(err)
	}
	converge(t, ns, total, "r0")
	takes := sharderLog.ok("take")
	moved := 0
	for key, o := range own {
		if o != "r1" {
			continue
		}
		for _, tk := range takes[key] {
			if tk.sent.After(released) {
				moved++
				if d := tk.sent.Sub(released); d < gap {
					t.Errorf("%s: taken from stopped r1 %s after its Lease went, want ≥ %s", key, d, gap)
				}
			}
		}
	}
	if moved == 0 {
		t.Error("nothing moved from stopped r1")
	}

	// A new ManifestSync, never owned, is assigned at once.
	created := time.Now()
	create("late")
	converge(t, ns, total+1, "r0")
	late := sharderLog.ok("assign")[ns+"/late"]
	if len(late) != 1 {
		t.Fatalf("the new ManifestSync was assigned %d times, want 1", len(late))
	}
	if d := late[0].sent.Sub(created); d >= gap {
		t.Errorf("a new ManifestSync was assigned %s after its creation, want at once (< %s)", d, gap)
	}

	// A sharder newly elected (this one stopped, another started) finds
	// ManifestSyncs of a replica whose Lease is gone, perhaps deleted a
	// moment before it led: it takes them no earlier than the gap after
	// its start, however many events wake it meanwhile.
	cancel()
	sdone <- <-sdone // stopped; left for the cleanup's receive
	gone := []string{ns + "/app-0", ns + "/app-1", ns + "/app-2"}
	for _, key := range gone {
		_, name, _ := strings.Cut(key, "/")
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"gone"}}}`, OwnerLabel)
		if err := env.Client.Patch(ctx, &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := NewSharder(env.Config, env.Scheme, env.Client, ns, labels.SelectorFromSet(labels.Set{"test": ns}))
	if err != nil {
		t.Fatal(err)
	}
	s2Log := &patchLog{}
	s2.Client = &recordingClient{Client: env.Client, log: s2Log}
	s2ctx, cancel2 := context.WithCancel(ctx)
	s2done := make(chan error, 1)
	started := time.Now()
	go func() { s2done <- s2.Start(s2ctx) }()
	t.Cleanup(func() { cancel2(); <-s2done })
	// Events that wake it: creations within the gap.
	for i := range 5 {
		create(fmt.Sprintf("wake-%d", i))
		time.Sleep(200 * time.Millisecond)
	}
	converge(t, ns, total+6, "r0")
	s2takes := s2Log.ok("take")
	for _, key := range gone {
		tk := s2takes[key]
		if len(tk) == 0 {
			t.Errorf("%s: never taken from replica gone", key)
			continue
		}
		if d := tk[0].sent.Sub(started); d < gap {
			t.Errorf("%s: taken from a replica gone %s after the new sharder started, want ≥ %s", key, d, gap)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.doubles {
		t.Error(d)
	}
}

// TestSharderCollectsDeadLeases: the Lease of a replica dead for over
// DeadLeaseAge (killed, never deleted it) is deleted, unless a
// ManifestSync is still labelled with its ID; a Lease renewed more
// recently stays.
func TestSharderCollectsDeadLeases(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	lease := func(id string, age time.Duration) {
		t.Helper()
		at := metav1.NewMicroTime(time.Now().Add(-age))
		secs := int32(15)
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(id)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &at, AcquireTime: &at}}
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	lease("dead", 2*DeadLeaseAge)
	lease("dead-owner", 2*DeadLeaseAge)
	lease("recent", DeadLeaseAge/2)
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept", Labels: map[string]string{"test": ns, OwnerLabel: "dead-owner"}},
		Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	s, err := NewSharder(env.Config, env.Scheme, env.Client, ns, labels.SelectorFromSet(labels.Set{"test": ns}))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Start(sctx) }()
	defer func() { cancel(); <-done }()
	exists := func(id string) bool {
		t.Helper()
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: LeaseName(id)}, &coordinationv1.Lease{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for deadline := time.Now().Add(30 * time.Second); exists("dead"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Lease of a replica dead for two hours was not deleted")
		}
	}
	time.Sleep(time.Second)
	if !exists("dead-owner") {
		t.Error("the Lease of a dead replica that still owns a ManifestSync was deleted")
	}
	if !exists("recent") {
		t.Error("a Lease renewed within DeadLeaseAge was deleted")
	}
}

// The sharder runs a pass for what can change an assignment (a shard
// label, a deletion, a Lease's holder), not for the status writes of the
// ManifestSyncs it watches nor for each renewal of a Lease: 100 status
// writes and the renewals of 6 s make a handful of passes (the expiries
// it waits for), not one each. A relabel still wakes it at once. Its
// cache keeps of each ManifestSync its shard labels and identity only.
func TestSharderQuietOnStatusWrites(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ctx := context.Background()
	var syncs []*v1alpha1.ManifestSync
	for i := range 5 {
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("q%d", i), Labels: map[string]string{"test": ns},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 4096)}},
			Spec: v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}}}}
		if err := env.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
		syncs = append(syncs, ms)
	}
	m := &Member{Client: env.Client, Namespace: ns, ID: "quiet-1", LeaseDuration: testLease, RenewDeadline: testLease - testMargin, RetryPeriod: testRenew}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	go func() { _ = m.Run(mctx) }()
	s, err := NewSharder(env.Config, env.Scheme, env.Client, ns, labels.SelectorFromSet(labels.Set{"test": ns}))
	if err != nil {
		t.Fatal(err)
	}
	s.Resync = time.Hour
	sctx, scancel := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- s.Start(sctx) }()
	defer func() { scancel(); <-sdone }()
	if own := converge(t, ns, len(syncs), "quiet-1"); len(own) != len(syncs) {
		t.Fatalf("owners %v", own)
	}
	var held metav1.PartialObjectMetadataList
	held.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ManifestSyncList"))
	if err := s.cache.List(ctx, &held); err != nil {
		t.Fatal(err)
	}
	for _, o := range held.Items {
		if len(o.Annotations) != 0 || len(o.Labels) != 1 || o.Labels[OwnerLabel] != "quiet-1" {
			t.Errorf("the sharder holds of %s annotations %d, labels %v; want its owner label only", o.Name, len(o.Annotations), o.Labels)
		}
	}

	time.Sleep(500 * time.Millisecond) // the passes of the assignment are over
	before := s.passes.Load()
	start := time.Now()
	for i := range 100 {
		ms := syncs[i%len(syncs)]
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status.ObservedGeneration = int64(i + 1)
		if err := env.Client.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // past the sharder's 50 ms of settling
	}
	elapsed := time.Since(start)
	// At most a pass per expiry of the Lease it saw (renewed every
	// testRenew, testLease long), and one spare.
	if n, most := s.passes.Load()-before, int64(elapsed/(testLease-testRenew))+2; n > most {
		t.Errorf("%d passes in %s of status writes and renewals, want at most %d", n, elapsed.Round(time.Millisecond), most)
	}

	// A relabel by hand wakes it: it takes the ManifestSync back.
	cur := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(syncs[0]), cur); err != nil {
		t.Fatal(err)
	}
	delete(cur.Labels, OwnerLabel)
	if err := env.Client.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	converge(t, ns, len(syncs), "quiet-1")
}
