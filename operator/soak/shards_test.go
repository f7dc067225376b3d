package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The sharded fault soak (issue 29): three replicas of `engine operator
// --shards auto`, each its own user of a control plane of the test's own
// whose audit log records every write, sync the soak's fleet (without
// its remote targets) while its sources change and a seeded schedule
// kills (kill -9; restarted with its ID or a new one), pauses (SIGSTOP
// for longer than the Lease, then SIGCONT) and restarts (SIGTERM) them.
// Every invariant of TestSoak holds, and, from the audit log
// (checkShardEvents): every write of a managed object or a ManifestSync's
// status is made by the replica its ManifestSync is labelled to at that
// moment; no replica writes past its fence (nor before its first
// renewal, nor after it deleted its Lease), and a paused one writes
// nothing, its Lease included, until its restarted process renews; no
// ManifestSync moves from a replica but the handover gap after it let go
// of it, or past its fence; no object is written by two replicas within
// a second. After the faults every ManifestSync is owned by a live
// replica, Ready, at its last revision.

const (
	shardReplicas = 3
	// shardUserPrefix and the replica's ID name its user of the API
	// server: the audit log tells the replicas apart by it.
	shardUserPrefix = "soak-shard-"
	// shardNS holds the Leases (--leader-election-namespace).
	shardNS = "soak-shards"
	// fenceSlack is how much later than its fence (the deadline after
	// its last renewal) a replica's write may reach the API server: the
	// transport guard lets a write leave until the deadline, measured
	// from before the renewal was sent; the write's transit and the
	// renewal's are not the replica's to bound. Still 4 s before the
	// Lease expires.
	fenceSlack = time.Second
	// shardShortFaults is how long faults run in the short form (make
	// test, no SOAK_DURATION): one kill -9, one pause, one SIGTERM.
	shardShortFaults = 40 * time.Second
	// settleWithin bounds the wait, after the faults, until every
	// ManifestSync is owned by a live replica, none draining, and every
	// live replica owns some.
	settleWithin = 90 * time.Second
)

// Replica faults, beyond the operator soak's kinds.
const (
	faultReplicaKill    faultKind = numFaultKinds + iota // kill -9, restarted with its ID
	faultReplicaKillNew                                  // kill -9, a new replica with a new ID
	faultReplicaPause                                    // SIGSTOP past the Lease, then SIGCONT
	faultReplicaTerm                                     // SIGTERM, restarted with its ID
)

var shardFaultNames = [...]string{
	"kill -9 of a replica, restarted with its ID after 0.5-3 s",
	"kill -9 of a replica, a new replica with a new ID after 0.5-3 s",
	"SIGSTOP of a replica past its Lease (16-22 s), then SIGCONT",
	"SIGTERM of a replica, restarted with its ID after 0.5-3 s",
}

func (k faultKind) replica() bool { return k >= faultReplicaKill && k <= faultReplicaTerm }

// Invariants of the sharded soak, beyond TestSoak's.
const (
	invOwnerWrites invariant = numInvariants + iota
	invFence
	invMove
	invTwoWriters
	invSettled
)

var shardInvNames = [...]string{
	"every write by the replica its ManifestSync is labelled to",
	"no write past a replica's fence, before its first renewal or after its Lease's deletion; none by a paused one until it restarted",
	"no ManifestSync moved but the handover gap after its owner let go of it, or past the owner's fence",
	"no object written by two replicas within 1 s",
	"every ManifestSync owned by a live replica, Ready, at its last revision",
}

// replica is one of the sharded run's replica slots: the process that
// runs in it now, under its ID, and those it ran before under other IDs.
type replica struct {
	mu   sync.Mutex
	id   string
	proc *operatorProc
	gone []*operatorProc
}

func (p *replica) current() (string, *operatorProc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id, p.proc
}

func (p *replica) logPaths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, o := range append(slices.Clone(p.gone), p.proc) {
		out = append(out, o.logPath)
	}
	return out
}

// pauseRecord is one pause of a replica, by the test's clock.
type pauseRecord struct {
	id       string
	proc     *operatorProc // restarted by itself once fenced
	from, to time.Time
}

// shardState is what the sharded run records beside run.
type shardState struct {
	mu      sync.Mutex
	nextID  int
	pauses  []pauseRecord
	starts  map[string]int // processes started, by ID
	logDir  string
	audit   string
	results []string // the audit checks' figures, for the report
}

// TestSoakShards runs the sharded fault soak (see the comment above);
// SOAK_DURATION sets how long faults run (default 40 s: one kill -9, one
// pause, one SIGTERM), SOAK_SEED replays a schedule.
func TestSoakShards(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped under -short")
	}
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	cfg := loadConfig(t)
	long := shardShortFaults
	if os.Getenv("SOAK_DURATION") != "" {
		long = cfg.duration
	}
	// The ManifestSyncs of a replica killed by the last fault move when
	// its Lease expires: the limit counts from then.
	limit := cfg.converge + shard.DefaultLeaseDuration
	t.Logf("sharded soak: seed %d (SOAK_SEED=%d replays this schedule), %d replicas, faults for %v, convergence limit %v",
		cfg.seed, cfg.seed, shardReplicas, long, limit)
	klog.SetLogger(logr.Discard())

	auditDir := t.TempDir()
	audit := filepath.Join(auditDir, "audit.log")
	own, err := testenv.Start(shardAuditLog(audit))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rng := rand.New(rand.NewPCG(cfg.seed, 0x5a4d))
	r := &run{t: t, cfg: cfg, f: newFleet(rng), client: own.Client, local: own}
	r.f.localOnly()
	r.mon = newMonitor(r)
	logDir, err := os.MkdirTemp("", "soak-shards-")
	if err != nil {
		t.Fatal(err)
	}
	r.shards = &shardState{nextID: shardReplicas + 1, starts: map[string]int{}, logDir: logDir, audit: audit}
	faults := shardSchedule(rng, long)
	r.phases = 1

	began := time.Now()
	if err := r.setupShards(ctx); err != nil {
		t.Fatal(err)
	}
	// Every process, paused or not, is ended when the test ends.
	t.Cleanup(r.stopReplicas)
	if err := r.mon.watch(ctx, local, own.Config); err != nil {
		t.Fatal(err)
	}
	go r.mon.follow(ctx)
	for _, p := range r.replicas {
		if err := p.proc.start(); err != nil {
			t.Fatal(err)
		}
	}
	r.start = time.Now()
	r.mon.converge(ctx, "initial sync", r.start, 2*time.Minute, false)
	t.Logf("set up and synced in %v", time.Since(began).Round(100*time.Millisecond))

	if !t.Failed() {
		r.runPhase(ctx, faults)
		var last time.Time
		for _, f := range faults {
			if f.end.After(last) {
				last = f.end
			}
		}
		t.Logf("%d faults injected by %s", len(faults), r.since(last))
		r.mon.converge(ctx, "after the faults", last, limit, true)
		r.settle(ctx)
	}
	r.stopReplicas()
	for _, check := range []func(context.Context) error{r.mon.checkForeign, r.mon.scanStatuses, r.mon.scanAllEvents} {
		if err := check(ctx); err != nil {
			t.Errorf("end: %v", err)
		}
	}
	if err := r.mon.scanLog(); err != nil {
		t.Errorf("end: reading the operators' logs: %v", err)
	}
	if err := r.checkShardAudit(audit, faults); err != nil {
		t.Errorf("reading the audit log: %v", err)
	}
	r.mon.checkWrites()

	table := r.shardReport()
	t.Log("\n" + table)
	t.Log("\n" + r.timeline())
	if path := os.Getenv("SOAK_REPORT"); path != "" {
		if err := os.WriteFile(strings.TrimSuffix(path, ".md")+"-shards.md", []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	r.fail()
	if t.Failed() {
		t.Logf("seed %d: SOAK_SEED=%d replays this schedule; the replicas' logs: %s; the audit log: %s", cfg.seed, cfg.seed, logDir, audit)
		// The audit log is kept with the logs (t.TempDir goes).
		_ = copyFile(audit, filepath.Join(logDir, "audit.log"))
		t.Logf("the audit log, copied: %s", filepath.Join(logDir, "audit.log"))
	} else {
		_ = os.RemoveAll(logDir)
	}
}

func copyFile(from, to string) error {
	raw, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, raw, 0o644)
}

// shardAuditLog is testenv.WithAuditLog's policy, with the ManifestSyncs'
// own writes (their labels: the sharder's assignments, the replicas'
// drain acknowledgements) logged with the object written, so that the
// owner of each ManifestSync is known at every moment.
func shardAuditLog(path string) testenv.Option {
	return testenv.WithAuditPolicy(path, `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  verbs: [create, update, patch]
  resources:
  - group: manifestsync.dev
    resources: [manifestsyncs]
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`)
}

// localOnly drops the fleet's remote targets: the sharded run has no
// remote cluster (the transport guard covers this cluster's writes only;
// docs/sharding.md).
func (f *fleet) localOnly() {
	f.change(func() {
		for _, s := range f.syncs {
			s.targets = slices.DeleteFunc(s.targets, func(t target) bool { return t.cluster == remote })
		}
		f.ever = map[objKey]*msync{}
		f.desiredSince = map[objKey]time.Time{}
	})
}

// setupShards makes what setup makes but the remote cluster, the faulty
// ManifestSyncs and the webhook receiver, and the replicas (not started).
func (r *run) setupShards(ctx context.Context) error {
	allowHomes := map[string]string{allowFrom: strings.Join(homeNames(), ",")}
	ns := func(name string, labels, annotations map[string]string) error {
		return r.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations}})
	}
	for _, name := range append(homeNames(), shardNS) {
		if err := ns(name, nil, nil); err != nil {
			return err
		}
	}
	for i := range targetNSs {
		if err := ns(targetNS(i), nil, allowHomes); err != nil {
			return err
		}
	}
	for i := range selectables {
		var labels map[string]string
		if g := r.f.nsGroups[selectNS(i)]; g != "" {
			labels = map[string]string{groupLabel: g}
		}
		if err := ns(selectNS(i), labels, allowHomes); err != nil {
			return err
		}
	}
	if err := ns(foreignNS, map[string]string{groupLabel: foreignGroup}, nil); err != nil {
		return err
	}
	for _, s := range r.f.syncs {
		if s.kind != kindGit {
			if err := r.f.writeSource(ctx, r.client, s); err != nil {
				return err
			}
		}
	}
	rng := rand.New(rand.NewPCG(r.cfg.seed, 0xf0))
	if err := r.foreignObjects(ctx, rng); err != nil {
		return err
	}
	var err error
	if r.git, err = newGitServer(r.t); err != nil {
		return err
	}
	if err := r.git.commit(r.f.gitFiles()); err != nil {
		return err
	}
	for _, s := range r.f.syncs {
		if err := r.client.Create(ctx, s.manifestSync(r.git.url())); err != nil {
			return fmt.Errorf("creating %s: %w", s, err)
		}
	}
	if err := r.operatorRBAC(ctx); err != nil {
		return err
	}
	for i := range shardReplicas {
		id := fmt.Sprintf("s%d", i+1)
		o, err := r.newReplicaProc(id)
		if err != nil {
			return err
		}
		r.replicas = append(r.replicas, &replica{id: id, proc: o})
	}
	return nil
}

// newReplicaProc prepares `engine operator --shards auto --shard-id id`
// as the user shardUserPrefix+id, impersonating the soak's operator user
// (its RBAC: everything but Pods), with a home and a cache of its own.
func (r *run) newReplicaProc(id string) (*operatorProc, error) {
	admin, err := r.local.Kubeconfig(shardUserPrefix + id)
	if err != nil {
		return nil, err
	}
	kc, err := impersonate(admin)
	if err != nil {
		return nil, err
	}
	dir := r.t.TempDir()
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return nil, err
	}
	st := r.shards
	st.mu.Lock()
	st.starts[id]++
	logPath := filepath.Join(st.logDir, fmt.Sprintf("%s-%d.log", id, st.starts[id]))
	st.mu.Unlock()
	return &operatorProc{
		bin: engineBin, kubeconfig: kcPath, logPath: logPath,
		env:  []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CACHE_HOME=" + filepath.Join(dir, "cache")},
		args: []string{"--shards", "auto", "--shard-id", id, "--leader-elect", "--leader-election-namespace", shardNS},
	}, nil
}

// stopReplicas ends every replica process the run started, by its
// process group: resumed first if paused, then SIGTERM, SIGKILL after
// 10 s.
func (r *run) stopReplicas() {
	var wg sync.WaitGroup
	for _, p := range r.replicas {
		p.mu.Lock()
		procs := append(slices.Clone(p.gone), p.proc)
		p.mu.Unlock()
		for _, o := range procs {
			wg.Go(func() {
				_ = o.signal(syscall.SIGCONT)
				o.stop()
			})
		}
	}
	wg.Wait()
}

// liveIDs are the IDs of the replicas that run now.
func (r *run) liveIDs() []string {
	var out []string
	for _, p := range r.replicas {
		if id, o := p.current(); o.isRunning() {
			out = append(out, id)
		}
	}
	return out
}

// shardSchedule draws the sharded run's faults from rng: in a short run
// (under 2 minutes) a kill -9 restarted with a new ID, a pause past the
// Lease and a SIGTERM restarted with the same ID, each of another
// replica; in a longer one a replica fault of a random kind every 10 to
// 25 s, of a replica not under a fault, never leaving fewer than one
// replica up. Throughout, a source change every 2 s and a hand edit or
// deletion every 5 s, on average; when all are over, a hand edit and two
// source changes.
func shardSchedule(rng *rand.Rand, long time.Duration) []*fault {
	var out []*fault
	add := func(kind faultKind, at, dur time.Duration, slot int) {
		out = append(out, &fault{phase: 1, kind: kind, at: at, dur: dur, slot: slot, seed: rng.Uint64()})
	}
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	restart := func() time.Duration { return uniform(500*time.Millisecond, 3*time.Second) }
	pause := func() time.Duration {
		return uniform(shard.DefaultLeaseDuration+time.Second, shard.DefaultLeaseDuration+7*time.Second)
	}
	if long < 2*time.Minute {
		slots := rng.Perm(shardReplicas)
		add(faultReplicaKillNew, uniform(0, 3*time.Second), restart(), slots[0])
		add(faultReplicaPause, uniform(3*time.Second, 6*time.Second), pause(), slots[1])
		add(faultReplicaTerm, max(0, long-uniform(8*time.Second, 12*time.Second)), restart(), slots[2])
	} else {
		// busy is when each replica is back in the ring after its fault
		// (a replica restarted with its ID waits out its old Lease: 15 s).
		busy := make([]time.Duration, shardReplicas)
		for at := uniform(0, 5*time.Second); at < long-25*time.Second; at += uniform(10*time.Second, 25*time.Second) {
			var free []int
			for i, b := range busy {
				if b <= at {
					free = append(free, i)
				}
			}
			if len(free) < 2 {
				continue
			}
			slot := free[rng.IntN(len(free))]
			kind := faultReplicaKill + faultKind(rng.IntN(4))
			dur := restart()
			if kind == faultReplicaPause {
				dur = pause()
			}
			add(kind, at, dur, slot)
			busy[slot] = at + dur + 20*time.Second
		}
	}
	end := long - 2*time.Second
	for range int(long / (2 * time.Second)) {
		add(faultChurnSecret+faultKind(rng.IntN(4)), uniform(0, end), 0, 0)
	}
	for range int(long / (5 * time.Second)) {
		kind := faultEdit
		if rng.IntN(4) == 0 {
			kind = faultDelete
		}
		add(kind, uniform(0, end), 0, 0)
	}
	slices.SortStableFunc(out, func(a, b *fault) int { return int(a.at - b.at) })
	for _, kind := range []faultKind{faultEdit, faultChurnSecret, faultChurnConfigMap} {
		add(kind, long, 0, 0)
		out[len(out)-1].final = true
	}
	return out
}

// replicaFault runs a fault of a replica.
func (r *run) replicaFault(f *fault) error {
	p := r.replicas[f.slot]
	id, o := p.current()
	f.note = "replica " + id
	var err error
	switch f.kind {
	case faultReplicaKill, faultReplicaKillNew:
		err = o.kill9()
		time.Sleep(f.dur)
		if f.kind == faultReplicaKill {
			return errors.Join(err, o.start())
		}
		st := r.shards
		st.mu.Lock()
		newID := fmt.Sprintf("s%d", st.nextID)
		st.nextID++
		st.mu.Unlock()
		n, newErr := r.newReplicaProc(newID)
		if newErr != nil {
			return errors.Join(err, newErr)
		}
		o.stop() // gone for good: it must not restart under its old ID
		p.mu.Lock()
		p.gone = append(p.gone, o)
		p.id, p.proc = newID, n
		p.mu.Unlock()
		f.note += ", then " + newID
		return errors.Join(err, n.start())
	case faultReplicaPause:
		from := time.Now()
		err = o.signal(syscall.SIGSTOP)
		time.Sleep(f.dur)
		err = errors.Join(err, o.signal(syscall.SIGCONT))
		st := r.shards
		st.mu.Lock()
		st.pauses = append(st.pauses, pauseRecord{id: id, proc: o, from: from, to: time.Now()})
		st.mu.Unlock()
		f.note += fmt.Sprintf(", paused %v", time.Since(from).Round(100*time.Millisecond))
		return err
	case faultReplicaTerm:
		err = o.term()
		time.Sleep(f.dur)
		return errors.Join(err, o.start())
	}
	return nil
}

// settle waits until every ManifestSync is owned by a live replica, none
// draining, and every live replica owns some (the ring has settled), then
// checks that every ManifestSync converged there and applied its last
// evaluated revision.
func (r *run) settle(ctx context.Context) {
	start := time.Now()
	var why string
	for {
		why = r.unsettled(ctx)
		if why == "" || time.Since(start) > settleWithin {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.mon.count(invSettled, len(r.f.syncs))
	if why != "" {
		r.mon.violate(invSettled, time.Now(), "the ring", fmt.Sprintf("not settled %v after the faults: %s", settleWithin, why))
		return
	}
	r.t.Logf("settled on replicas %v in %v", r.liveIDs(), time.Since(start).Round(100*time.Millisecond))
	r.mon.converge(ctx, "settled", time.Now(), r.cfg.converge, false)
	var list v1alpha1.ManifestSyncList
	if err := r.client.List(ctx, &list); err != nil {
		r.t.Errorf("listing ManifestSyncs: %v", err)
		return
	}
	for _, ms := range list.Items {
		st := ms.Status
		if st.LastAppliedRevision == "" || st.LastAppliedRevision != st.LastEvaluatedRevision {
			r.mon.violate(invSettled, time.Now(), fmt.Sprintf("ManifestSync %s/%s", ms.Namespace, ms.Name),
				fmt.Sprintf("applied revision %q, last evaluated %q", st.LastAppliedRevision, st.LastEvaluatedRevision))
		}
	}
}

// unsettled says why the ring has not settled, or "".
func (r *run) unsettled(ctx context.Context) string {
	live := r.liveIDs()
	var list v1alpha1.ManifestSyncList
	if err := r.client.List(ctx, &list); err != nil {
		return err.Error()
	}
	owned := map[string]int{}
	var bad []string
	for _, ms := range list.Items {
		owner, drain := ms.Labels[shard.OwnerLabel], ms.Labels[shard.DrainLabel]
		owned[owner]++
		if !slices.Contains(live, owner) || drain != "" {
			bad = append(bad, fmt.Sprintf("%s/%s (owner %q, drain %q)", ms.Namespace, ms.Name, owner, drain))
		}
	}
	var leases coordinationv1.LeaseList
	if err := r.client.List(ctx, &leases, client.InNamespace(shardNS)); err != nil {
		return err.Error()
	}
	for _, id := range live {
		if owned[id] == 0 {
			bad = append(bad, fmt.Sprintf("live replica %s owns nothing", id))
		}
		if !slices.ContainsFunc(leases.Items, func(l coordinationv1.Lease) bool { return l.Name == shard.LeasePrefix+id }) {
			bad = append(bad, fmt.Sprintf("live replica %s has no Lease", id))
		}
	}
	if len(bad) > 5 {
		bad = append(bad[:5], fmt.Sprintf("and %d more", len(bad)-5))
	}
	return strings.Join(bad, "; ")
}

// auditEvent is an audit event as the sharded soak reads it.
type auditEvent = testenv.AuditEvent

// readShardAudit reads the run's audit log: the requests the API server
// accepted, in the order it received them.
func readShardAudit(path string) ([]auditEvent, error) {
	events, err := testenv.ReadAudit(path)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(events, func(ev auditEvent) bool { return ev.ResponseStatus.Code >= 300 })
	slices.SortStableFunc(out, func(a, b auditEvent) int { return a.RequestReceivedTimestamp.Compare(b.RequestReceivedTimestamp) })
	return out, nil
}

// labelling is a ManifestSync's shard labels from a write on.
type labelling struct {
	at           time.Time
	by           string // the writer's replica ID, or "" (the test)
	owner, drain string
}

// replicaOf is the replica ID of an audit user, or "".
func replicaOf(user string) string {
	id, ok := strings.CutPrefix(user, shardUserPrefix)
	if !ok {
		return ""
	}
	return id
}

// checkShardAudit reads the audit log and checks it (checkShardEvents).
func (r *run) checkShardAudit(path string, faults []*fault) error {
	events, err := readShardAudit(path)
	if err != nil {
		return err
	}
	r.checkShardEvents(events, faults)
	return nil
}

// checkShardEvents checks the replicas' writes in the audit log:
//
//   - each write of a managed object or of a ManifestSync's status is
//     made while its ManifestSync is labelled to the writer;
//   - no write (but of its Lease) before a replica's first renewal of its
//     Lease, past its fence (the last renewal plus the renew deadline,
//     plus fenceSlack), or after it deleted its Lease before it renews it
//     again; and no write at all, its Lease's included, by a paused
//     replica from its fence until its restarted process renews;
//   - each move of a ManifestSync from one replica to another follows the
//     old owner's letting go (its drain acknowledged, or its Lease
//     deleted) by the sharder's handover gap at least, or the old owner's
//     fence;
//   - no object is written by two replicas within a second (the handover
//     gap keeps a move's writers more than a second apart; an expired
//     replica's stopped writing 5 s before its expiry);
//   - each pause outlasted the Lease as the API server saw it.
func (r *run) checkShardEvents(events []auditEvent, faults []*fault) {
	st := r.shards
	fence := shard.DefaultRenewDeadline
	// The ManifestSyncs' labels over time, and each replica's Lease
	// writes (renewals, and its deletion when it stops).
	labels := map[string][]labelling{}
	renewals := map[string][]time.Time{}
	deletions := map[string][]time.Time{}
	type write struct {
		id  string
		at  time.Time
		obj string
		ms  string // its ManifestSync, namespace/name, or "" if none of the fleet's
	}
	var writes, leaseWrites []write
	msOf := map[objKey]string{}
	r.f.mu.Lock()
	for k, s := range r.f.ever {
		msOf[k] = s.ns + "/" + s.name
	}
	r.f.mu.Unlock()
	for _, ev := range events {
		ref := ev.ObjectRef
		id := replicaOf(ev.User.Username)
		obj := ref.Resource + " " + ref.Namespace + "/" + ref.Name
		if ref.Subresource != "" {
			obj += "/" + ref.Subresource
		}
		switch {
		case ref.Resource == "manifestsyncs" && ref.Subresource == "" && ev.ResponseObject != nil:
			l := ev.ResponseObject.Metadata.Labels
			key := ref.Namespace + "/" + ref.Name
			labels[key] = append(labels[key], labelling{ev.RequestReceivedTimestamp, id, l[shard.OwnerLabel], l[shard.DrainLabel]})
			continue
		case id == "":
			continue
		case ref.Resource == "leases":
			if ref.Namespace == shardNS && ref.Name == shard.LeasePrefix+id {
				if ev.Verb == "delete" {
					deletions[id] = append(deletions[id], ev.RequestReceivedTimestamp)
				} else {
					renewals[id] = append(renewals[id], ev.RequestReceivedTimestamp)
				}
				leaseWrites = append(leaseWrites, write{id: id, at: ev.RequestReceivedTimestamp, obj: obj})
			}
			continue
		}
		w := write{id: id, at: ev.RequestReceivedTimestamp, obj: obj}
		switch {
		case ref.Resource == "manifestsyncs" && ref.Subresource == "status":
			w.ms = ref.Namespace + "/" + ref.Name
		case ref.Resource == "configmaps" || ref.Resource == "secrets":
			kind := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret"}[ref.Resource]
			w.ms = msOf[objKey{local, kind, ref.Namespace, ref.Name}]
		}
		writes = append(writes, w)
	}
	cmp := func(a, b time.Time) int { return a.Compare(b) }
	// labelsAt is the ManifestSync's labelling at t (the last written
	// before it).
	labelsAt := func(ms string, t time.Time) labelling {
		ls := labels[ms]
		i, _ := slices.BinarySearchFunc(ls, t, func(l labelling, t time.Time) int { return l.at.Compare(t) })
		if i == 0 {
			return labelling{}
		}
		return ls[i-1]
	}
	// lastBefore is the last time of ts (ascending) before t.
	lastBefore := func(ts []time.Time, t time.Time) (time.Time, bool) {
		i, _ := slices.BinarySearchFunc(ts, t, cmp)
		if i == 0 {
			return time.Time{}, false
		}
		return ts[i-1], true
	}
	// firstAfter is the first time of ts (ascending) after t.
	firstAfter := func(ts []time.Time, t time.Time) (time.Time, bool) {
		i, found := slices.BinarySearchFunc(ts, t, cmp)
		if found {
			i++
		}
		if i == len(ts) {
			return time.Time{}, false
		}
		return ts[i], true
	}
	// deletedBetween is when the replica deleted its Lease between from
	// and to, if it did.
	deletedBetween := func(id string, from, to time.Time) (time.Time, bool) {
		for _, d := range deletions[id] {
			if d.After(from) && d.Before(to) {
				return d, true
			}
		}
		return time.Time{}, false
	}

	byReplica := map[string]int{}
	var owned int
	for _, w := range writes {
		byReplica[w.id]++
		r.mon.count(invFence, 1)
		last, ok := lastBefore(renewals[w.id], w.at)
		_, deleted := deletedBetween(w.id, last, w.at)
		switch {
		case !ok:
			r.mon.violate(invFence, w.at, w.obj, fmt.Sprintf("written by replica %s at %s, before its first renewal of its Lease", w.id, w.at.Format(time.StampMilli)))
		case w.at.Sub(last) > fence+fenceSlack:
			r.mon.violate(invFence, w.at, w.obj, fmt.Sprintf("written by replica %s at %s, %v after its last renewal: past its fence (%v) and the slack (%v)",
				w.id, w.at.Format(time.StampMilli), w.at.Sub(last).Round(time.Millisecond), fence, fenceSlack))
		case deleted:
			r.mon.violate(invFence, w.at, w.obj, fmt.Sprintf("written by replica %s at %s, after it deleted its Lease, before renewing it again", w.id, w.at.Format(time.StampMilli)))
		}
		if w.ms == "" {
			continue
		}
		owned++
		r.mon.count(invOwnerWrites, 1)
		if l := labelsAt(w.ms, w.at); l.owner != w.id {
			r.mon.violate(invOwnerWrites, w.at, w.obj, fmt.Sprintf("written by replica %s at %s while ManifestSync %s was labelled to %q (drain %q) since %s",
				w.id, w.at.Format(time.StampMilli), w.ms, l.owner, l.drain, l.at.Format(time.StampMilli)))
		}
	}
	// Not vacuous: the replicas synced the fleet between them.
	if len(byReplica) < 2 || owned < len(r.f.syncs) {
		r.mon.violate(invOwnerWrites, time.Now(), "the audit log", fmt.Sprintf("holds %d writes of managed objects and statuses by the replicas (%v): want every ManifestSync's, by more than one replica", owned, byReplica))
	}

	// A paused replica writes nothing, its Lease included, from its fence
	// (its last renewal before the pause, plus the renew deadline and the
	// slack) until its restarted process renews its Lease.
	var pausesChecked int
	for _, p := range st.pauses {
		rs := renewals[p.id]
		last, ok := lastBefore(rs, p.from.Add(time.Second))
		if !ok {
			r.mon.violate(invFence, p.from, "replica "+p.id, "paused before it ever renewed its Lease")
			continue
		}
		// The pause outlasted the Lease, as the API server saw it: the
		// renewal before it and the next are farther apart.
		if next, ok := firstAfter(rs, last); ok && next.Sub(last) <= shard.DefaultLeaseDuration {
			r.mon.violate(invFence, p.from, "replica "+p.id, fmt.Sprintf("paused from %s to %s, but renewed its Lease at %s and %s, %v apart: the pause did not outlast its Lease",
				p.from.Format(time.StampMilli), p.to.Format(time.StampMilli), last.Format(time.StampMilli), next.Format(time.StampMilli), next.Sub(last).Round(time.Millisecond)))
		}
		var restarts []time.Time
		if p.proc != nil {
			p.proc.mu.Lock()
			restarts = slices.Clone(p.proc.startedAt)
			p.proc.mu.Unlock()
		}
		restarted, ok := firstAfter(restarts, p.to)
		if !ok {
			r.mon.violate(invFence, p.to, "replica "+p.id, "not restarted after its pause: a replica resumed past its fence must exit")
			continue
		}
		reRegistered, ok := firstAfter(rs, restarted)
		if !ok {
			reRegistered = time.Now()
		}
		from := last.Add(fence + fenceSlack)
		pausesChecked++
		for _, w := range append(slices.Clone(writes), leaseWrites...) {
			if w.id == p.id && w.at.After(from) && w.at.Before(reRegistered) {
				r.mon.violate(invFence, w.at, w.obj, fmt.Sprintf("written by replica %s at %s, paused from %s to %s: after its fence (%s) and before its restarted process renewed its Lease (%s)",
					w.id, w.at.Format(time.StampMilli), p.from.Format(time.StampMilli), p.to.Format(time.StampMilli), from.Format(time.StampMilli), reRegistered.Format(time.StampMilli)))
			}
		}
	}

	// Moves: a ManifestSync labelled from one owner to another by the
	// sharder must have been let go of by the old owner (its drain
	// acknowledged: its labels removed by it; or its Lease deleted) the
	// handover gap before at least, or taken after the old owner's fence.
	moves := map[string]int{}
	var expired, drained, stopped int
	soonest, quickest := time.Duration(-1), time.Duration(-1)
	gap := shard.DefaultHandoverGap
	// heldUntil is the last renewal before t of the process of replica id
	// that held its Lease at from: the renewals after from until one
	// that follows a deletion of the Lease, or a pause of at least the
	// fence (a process renews nothing past its fence), which only a
	// later process of the ID makes.
	heldUntil := func(id string, from, t time.Time) time.Time {
		rs := renewals[id]
		last, ok := lastBefore(rs, from)
		if !ok {
			last = from
		}
		i, _ := slices.BinarySearchFunc(rs, from, cmp)
		for ; i < len(rs) && rs[i].Before(t); i++ {
			if _, deleted := deletedBetween(id, last, rs[i]); deleted || rs[i].Sub(last) >= fence {
				break
			}
			last = rs[i]
		}
		return last
	}
	for ms, ls := range labels {
		prev := ""
		var ackAt, labelledAt time.Time
		for _, l := range ls {
			if l.owner == "" {
				if prev != "" && l.by == prev && ackAt.IsZero() {
					ackAt = l.at // the drain acknowledged
				}
				continue
			}
			if l.owner == prev {
				ackAt, labelledAt = time.Time{}, l.at // labelled to its old owner again
				continue
			}
			if prev != "" {
				moves[ms]++
				r.mon.count(invMove, 1)
				// Judged on the process of prev it was labelled to: a
				// later process of the ID lets go of what an earlier one
				// held before it syncs anything (releaseEarlier), so the
				// sharder may take it from the earlier one while the
				// later renews.
				last := heldUntil(prev, labelledAt, l.at)
				deletedAt, deleted := deletedBetween(prev, last, l.at)
				letGo := ackAt
				if deleted && (letGo.IsZero() || deletedAt.Before(letGo)) {
					letGo = deletedAt
				}
				switch {
				case !letGo.IsZero():
					if !ackAt.IsZero() {
						drained++
					} else {
						stopped++
					}
					if d := l.at.Sub(letGo); quickest < 0 || d < quickest {
						quickest = d
					}
					if l.at.Sub(letGo) < gap {
						r.mon.violate(invMove, l.at, "ManifestSync "+ms, fmt.Sprintf("labelled to %s at %s, %v after %s let go of it: less than the handover gap (%v)",
							l.owner, l.at.Format(time.StampMilli), l.at.Sub(letGo).Round(time.Millisecond), prev, gap))
					}
				case l.at.Sub(last) >= fence:
					expired++
					if d := l.at.Sub(last); soonest < 0 || d < soonest {
						soonest = d
					}
				default:
					r.mon.violate(invMove, l.at, "ManifestSync "+ms, fmt.Sprintf("moved from %s to %s at %s, %v after %s's last renewal (%s), without its drain or its Lease's deletion",
						prev, l.owner, l.at.Format(time.StampMilli), l.at.Sub(last).Round(time.Millisecond), prev, last.Format(time.StampMilli)))
				}
			}
			prev, ackAt, labelledAt = l.owner, time.Time{}, l.at
		}
	}
	r.f.change(func() {
		for _, s := range r.f.syncs {
			s.moves = moves[s.ns+"/"+s.name]
		}
	})
	if expired == 0 && slices.ContainsFunc(faults, func(f *fault) bool {
		return f.kind == faultReplicaKill || f.kind == faultReplicaKillNew || f.kind == faultReplicaPause
	}) {
		r.mon.violate(invMove, time.Now(), "the faults", "no ManifestSync moved from a replica killed or paused: the faults took nothing away")
	}

	// Two replicas writing one object within a second.
	byObj := map[string][]write{}
	for _, w := range writes {
		if w.ms != "" {
			byObj[w.obj] = append(byObj[w.obj], w)
		}
	}
	closest := time.Duration(-1)
	for obj, ws := range byObj {
		for i := 1; i < len(ws); i++ {
			a, b := ws[i-1], ws[i]
			if a.id == b.id {
				continue
			}
			r.mon.count(invTwoWriters, 1)
			d := b.at.Sub(a.at)
			if closest < 0 || d < closest {
				closest = d
			}
			if d < time.Second {
				r.mon.violate(invTwoWriters, b.at, obj, fmt.Sprintf("written by replica %s at %s and by replica %s at %s, %v apart",
					a.id, a.at.Format(time.StampMilli), b.id, b.at.Format(time.StampMilli), d.Round(time.Millisecond)))
			}
		}
	}

	var total int
	for _, n := range moves {
		total += n
	}
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return d.Round(time.Millisecond).String()
	}
	res := []string{
		fmt.Sprintf("%d writes by the replicas (%v), %d of them of managed objects and statuses, each checked against its ManifestSync's owner label at the write's time; %d Lease writes",
			len(writes), byReplica, owned, len(leaseWrites)),
		fmt.Sprintf("%d moves of ManifestSyncs: %d drained and %d at a stop (Lease deleted), the quickest %s after the old owner let go; %d from a replica past its fence, the soonest %s after its last renewal",
			total, drained, stopped, ms(quickest), expired, ms(soonest)),
		fmt.Sprintf("the closest writes of one object by two replicas: %s apart; %d pauses past the Lease checked for writes between the fence and the restarted process's renewal",
			ms(closest), pausesChecked),
	}
	st.mu.Lock()
	st.results = res
	st.mu.Unlock()
	for _, line := range res {
		r.t.Log(line)
	}
}

// shardReport is the sharded run's table of faults and invariants.
func (r *run) shardReport() string {
	var b strings.Builder
	st := r.shards
	m := r.mon
	r.faultsMu.Lock()
	counts := map[faultKind][2]int{}
	for _, f := range r.faults {
		c := counts[f.kind]
		if f.skipped != "" {
			c[1]++
		} else {
			c[0]++
		}
		counts[f.kind] = c
	}
	r.faultsMu.Unlock()
	var selfExits int
	for _, p := range r.replicas {
		p.mu.Lock()
		for _, o := range append(slices.Clone(p.gone), p.proc) {
			o.mu.Lock()
			selfExits += len(o.selfExits)
			o.mu.Unlock()
		}
		p.mu.Unlock()
	}
	fmt.Fprintf(&b, "Sharded soak run: seed %d, %d replicas of `engine operator --shards auto`, %d ManifestSyncs (remote targets left out), %d managed objects written, %d foreign objects; %d exits of a replica's own (a paused replica exits once resumed past its fence).\n\n",
		r.cfg.seed, shardReplicas, len(r.f.syncs), len(m.writes), len(m.foreign), selfExits)
	st.mu.Lock()
	for _, line := range st.results {
		b.WriteString("- " + line + "\n")
	}
	st.mu.Unlock()
	b.WriteString("\n| fault | injected | skipped |\n|---|---:|---:|\n")
	for _, k := range []faultKind{faultReplicaKill, faultReplicaKillNew, faultReplicaPause, faultReplicaTerm,
		faultEdit, faultDelete, faultChurnSecret, faultChurnConfigMap, faultChurnGit, faultChurnNamespace} {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", k, counts[k][0], counts[k][1])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	broken := map[invariant]int{}
	for _, v := range m.violations {
		broken[v.inv]++
	}
	b.WriteString("\n| invariant | checks | result |\n|---|---:|---|\n")
	for _, inv := range []invariant{invLost, invForeign, invSecrets, invConverge, invWriteWar,
		invOwnerWrites, invFence, invMove, invTwoWriters, invSettled} {
		result := "held"
		if n := broken[inv]; n > 0 {
			result = fmt.Sprintf("**broken** (%d)", n)
		}
		fmt.Fprintf(&b, "| %s | %d | %s |\n", inv, m.checks[inv], result)
	}
	fmt.Fprintf(&b, "\nScanned for %d Secret values (raw and base64): %d operator log lines, %d events, %d ManifestSync statuses.\n",
		len(r.f.secrets), m.logLines, m.events, m.statuses)
	return b.String()
}

// TestShardAuditChecks: the audit checks of the sharded soak, without a
// cluster, on a made-up log: a clean one breaks nothing, and each fault
// breaks its invariant.
func TestShardAuditChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ev := func(user, verb, resource, sub, ns, name string, s float64) auditEvent {
		var e auditEvent
		e.Verb, e.User.Username = verb, user
		e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Namespace, e.ObjectRef.Name = resource, sub, ns, name
		e.ResponseStatus.Code = 200
		e.RequestReceivedTimestamp = at(s)
		return e
	}
	label := func(user, ns, name, owner, drain string, s float64) auditEvent {
		e := ev(user, "patch", "manifestsyncs", "", ns, name, s)
		e.ResponseObject = &testenv.AuditObject{}
		e.ResponseObject.Metadata.Labels = map[string]string{}
		if owner != "" {
			e.ResponseObject.Metadata.Labels[shard.OwnerLabel] = owner
		}
		if drain != "" {
			e.ResponseObject.Metadata.Labels[shard.DrainLabel] = drain
		}
		return e
	}
	u := func(id string) string { return shardUserPrefix + id }
	renew := func(id string, from, to float64) []auditEvent {
		var out []auditEvent
		for s := from; s <= to; s += 2 {
			out = append(out, ev(u(id), "update", "leases", "", shardNS, shard.LeasePrefix+id, s))
		}
		return out
	}
	status := func(id string, s *msync, sec float64) auditEvent {
		return ev(u(id), "patch", "manifestsyncs", "status", s.ns, s.name, sec)
	}
	// base: s1 and s2 renew from 0 to 60 s; every ManifestSync but the
	// second (left for the cases) is labelled to s1 or s2 at 0.5 s and
	// its status written at 2 s; the first moves from s1 to s2 by a drain
	// (acknowledged at 6 s, labelled at 8.5 s).
	base := func(r *run) []auditEvent {
		events := append(renew("s1", 0, 60), renew("s2", 0, 60)...)
		for i, s := range r.f.syncs {
			events = append(events, label("admin", s.ns, s.name, "", "", 0.1))
			if i != 1 {
				id := []string{"s1", "s2"}[i%2]
				events = append(events, label(u("s1"), s.ns, s.name, id, "", 0.5), status(id, s, 2))
			}
		}
		m := r.f.syncs[0]
		return append(events, label(u("s1"), m.ns, m.name, "s1", "s2", 5), label(u("s1"), m.ns, m.name, "", "", 6),
			label(u("s1"), m.ns, m.name, "s2", "", 8.5), status("s2", m, 9))
	}
	for _, tc := range []struct {
		name   string
		add    func(r *run) []auditEvent
		pause  *pauseRecord
		broken []invariant
	}{
		{name: "clean"},
		{name: "a write by a replica the ManifestSync is not labelled to", broken: []invariant{invOwnerWrites},
			add: func(r *run) []auditEvent { return []auditEvent{status("s1", r.f.syncs[0], 20)} }},
		{name: "two replicas within a second", broken: []invariant{invOwnerWrites, invTwoWriters},
			add: func(r *run) []auditEvent { return []auditEvent{status("s1", r.f.syncs[0], 9.5)} }},
		{name: "a write past the fence", broken: []invariant{invFence},
			add: func(r *run) []auditEvent {
				// s3 renews until 10 s and owns the second ManifestSync from 1 s.
				s := r.f.syncs[1]
				return append(renew("s3", 0, 10), label(u("s1"), s.ns, s.name, "s3", "", 1), status("s3", s, 21.5))
			}},
		{name: "a write before the first renewal", broken: []invariant{invFence},
			add: func(r *run) []auditEvent {
				s := r.f.syncs[1]
				return append(renew("s3", 4, 30), label(u("s1"), s.ns, s.name, "s3", "", 1), status("s3", s, 3))
			}},
		{name: "a move from a live owner without its drain", broken: []invariant{invMove},
			add: func(r *run) []auditEvent {
				s := r.f.syncs[5] // s2's
				return []auditEvent{label(u("s1"), s.ns, s.name, "s1", "", 12)}
			}},
		{name: "a drained move within the handover gap", broken: []invariant{invMove},
			add: func(r *run) []auditEvent {
				s := r.f.syncs[3] // s2's
				return []auditEvent{label(u("s1"), s.ns, s.name, "s2", "s1", 12), label(u("s2"), s.ns, s.name, "", "", 13), label(u("s1"), s.ns, s.name, "s1", "", 14)}
			}},
		{name: "a drain acknowledged, labelled to its owner again, then moved without one", broken: []invariant{invMove},
			add: func(r *run) []auditEvent {
				s := r.f.syncs[3] // s2's
				return []auditEvent{label(u("s1"), s.ns, s.name, "s2", "s1", 12), label(u("s2"), s.ns, s.name, "", "", 13),
					label(u("s1"), s.ns, s.name, "s2", "", 16), label(u("s1"), s.ns, s.name, "s1", "", 20)}
			}},
		{name: "a paused replica that renews once resumed", broken: []invariant{invFence},
			// s4 renews until 11 s, is paused from 12 to 30 s, renews at
			// 30.1 s (fenced), its process restarts at 31 s and renews
			// from 46 s.
			pause: &pauseRecord{id: "s4", proc: &operatorProc{startedAt: []time.Time{at(0), at(31)}}, from: at(12), to: at(30)},
			add: func(r *run) []auditEvent {
				s := r.f.syncs[1]
				return append(append(renew("s4", 1, 11), renew("s4", 46, 50)...), label(u("s1"), s.ns, s.name, "s4", "", 25),
					ev(u("s4"), "update", "leases", "", shardNS, shard.LeasePrefix+"s4", 30.1))
			}},
		{name: "a paused replica resumed and fenced", pause: &pauseRecord{id: "s4", proc: &operatorProc{startedAt: []time.Time{at(0), at(31)}}, from: at(12), to: at(30)},
			add: func(r *run) []auditEvent { return append(renew("s4", 1, 11), renew("s4", 46, 50)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRun(t)
			r.shards = &shardState{}
			if tc.pause != nil {
				r.shards.pauses = []pauseRecord{*tc.pause}
			}
			events := base(r)
			if tc.add != nil {
				events = append(events, tc.add(r)...)
			}
			slices.SortStableFunc(events, func(a, b auditEvent) int { return a.RequestReceivedTimestamp.Compare(b.RequestReceivedTimestamp) })
			r.checkShardEvents(events, nil)
			var broken []invariant
			for _, v := range r.mon.violations {
				if !slices.Contains(broken, v.inv) {
					broken = append(broken, v.inv)
				}
				t.Logf("%s: %s %s", v.inv, v.what, v.detail)
			}
			slices.Sort(broken)
			if !slices.Equal(broken, tc.broken) {
				t.Errorf("broken %v, want %v", broken, tc.broken)
			}
		})
	}
}
