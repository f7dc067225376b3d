// Package w9 is workload W9 of `make bench`: sharding (issue 29). 1,000
// ManifestSyncs, each applying 5 ConfigMaps from an inline Starlark
// transform, are spread over 1, 2 and 4 replicas of `engine operator
// --shards auto`, each a process of the image's engine of its own, as a user of
// its own of one local control plane whose API server logs every write of
// a ConfigMap (harness.WithWriteAudit). Each round runs every replica
// count from nothing: the replicas start and take their Leases, the
// ManifestSyncs are created, and it measures the time until all are Ready
// and each replica's peak memory (with its evaluation workers). With the
// most replicas it goes on: one more joins (how many ManifestSyncs move
// against the ideal 1/(N+1)), leaves again (SIGTERM), and then one of the
// N that does not run the sharder is killed (SIGKILL) and the params of
// its ManifestSyncs are changed, so that each must sync again: the time
// from the killed replica's Lease expiry to the last of its ManifestSyncs
// Ready at its new generation on another replica. Over the whole run, the
// audit log tells whether any ConfigMap was written by two replicas within
// one second (DoubleWrites).
//
// It is a benchmark: nothing in the product may import it.
package w9

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
	"github.com/manifestsync/manifestsync/operator/shard"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

const (
	workload = "W9 sharding"
	// DefaultSyncs is the count of ManifestSyncs.
	DefaultSyncs = 1000
	// objects are the ConfigMaps each ManifestSync applies.
	objects = 5
	// spread is how many namespaces the ManifestSyncs (and their
	// ConfigMaps) are spread over.
	spread = 10
	// leaseNS holds the replicas' Leases and the sharder's election.
	leaseNS      = "bench-w9-system"
	syncLabel    = "bench.manifestsync.dev/w9"
	setupWorkers = 16
	// userPrefix starts the name of every replica's user of the API
	// server, and of nothing else's.
	userPrefix = "w9-"
	// leaderLease is the sharder's election Lease (no selector).
	leaderLease = "manifestsync.dev"
	// settle is how long the replicas run once all are Ready before their
	// memory is read: the peak includes what follows the last write.
	settle = 2 * time.Second
	// stopGrace bounds a replica's SIGTERM before SIGKILL.
	stopGrace = 30 * time.Second
	// doubleWindow is the "two replicas within one second".
	doubleWindow = time.Second
)

// Config is one run of W9.
type Config struct {
	// Syncs are the ManifestSyncs; DefaultSyncs when 0.
	Syncs int
	// Replicas are the replica counts each round runs, ascending; the
	// first is the baseline of the ratios (1), the last is joined and
	// killed. 1, 2, 4 when nil.
	Replicas []int
	// Rounds of every replica count.
	Rounds int
	// Engine is the image's engine, with its engine-worker beside it
	// (enginebuild.Image); when "", the two are built into a temporary
	// directory.
	Engine string
	// Logs is the directory of the replicas' logs; a temporary one when "".
	Logs string
}

// Result is what a run measured: the report's rows and notes, and what
// the audit log counted.
type Result struct {
	Rows    []harness.Row
	Notes   []string
	Doubles []Double
	Writes  WriteStats
}

// Run is W9 of `make bench` on c, whose API server logs the writes of
// ConfigMaps (harness.WithWriteAudit): at least 3 rounds.
func Run(ctx context.Context, c *harness.Cluster, cfg Config) ([]harness.Row, []string, error) {
	cfg.Rounds = max(cfg.Rounds, 3)
	res, err := Measure(ctx, c, cfg)
	if err != nil {
		return nil, nil, err
	}
	return res.Rows, res.Notes, nil
}

// Measure runs cfg on c, cfg.Rounds times (at least once).
func Measure(ctx context.Context, c *harness.Cluster, cfg Config) (*Result, error) {
	if c.AuditLog == "" {
		return nil, errors.New("w9: the control plane logs no writes (harness.WithWriteAudit)")
	}
	if cfg.Syncs <= 0 {
		cfg.Syncs = DefaultSyncs
	}
	if len(cfg.Replicas) == 0 {
		cfg.Replicas = []int{1, 2, 4}
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	b, err := newBench(ctx, c, cfg)
	if err != nil {
		return nil, fmt.Errorf("w9: %w", err)
	}
	defer b.cleanupDir()
	// Rounds alternate the replica counts, the most first, so that the
	// machine's drift hits each alike.
	order := slices.Clone(cfg.Replicas)
	slices.Reverse(order)
	for round := 1; round <= cfg.Rounds; round++ {
		for _, n := range order {
			if err := b.run(ctx, round, n, n == order[0]); err != nil {
				return nil, fmt.Errorf("w9: round %d, %d replicas: %w", round, n, err)
			}
		}
	}
	if err := b.reset(ctx); err != nil {
		return nil, fmt.Errorf("w9: cleaning up: %w", err)
	}
	doubles, stats, err := CountDoubles(c.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("w9: %w", err)
	}
	return &Result{Rows: b.rows(doubles, stats), Notes: b.notes(doubles, stats), Doubles: doubles, Writes: stats}, nil
}

// replicaRun names the run of a replica's user ("w9-round1-4x-r2" is of
// run round1-4x); users not of userPrefix are no replica's.
func replicaRun(user string) (string, bool) {
	name, ok := strings.CutPrefix(user, userPrefix)
	if !ok {
		return "", false
	}
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		return name[:i], true
	}
	return name, true
}

// CountDoubles reads the audit log and counts the ConfigMaps written by
// two replicas (users of userPrefix) of one run within one second.
func CountDoubles(auditLog string) ([]Double, WriteStats, error) {
	events, err := testenv.ReadAudit(auditLog)
	if err != nil {
		return nil, WriteStats{}, fmt.Errorf("reading the audit log: %w", err)
	}
	doubles, stats := DoubleWrites(events, replicaRun, doubleWindow)
	return doubles, stats, nil
}

type bench struct {
	c      *harness.Cluster
	cfg    Config
	engine string
	// worker is engine-worker, beside engine: the replicas start their
	// evaluation workers with it, as the image's engine does.
	worker string
	// built is the directory newBench built the two into, removed at the
	// end, or "".
	built  string
	logs   string
	tmp    string // removed at the end, if the logs are there
	client client.WithWatch

	// By replica count: seconds from the first creation until all are
	// Ready; each round's largest peak of a replica (MiB), of its
	// resident set and of its anonymous memory, and the file-backed
	// pages of that replica's process; the most and fewest ManifestSyncs
	// a replica owned.
	// own is the largest peak of a replica's process alone (VmHWM);
	// workers, the most evaluation workers the replica of the largest
	// peak ran at once.
	ready, rss, anon, file, own, workers, most, fewest map[int][]float64
	// busy is the share of the machine's CPU time busy (%) from the
	// first creation until all were Ready.
	busy map[int][]float64
	// Of the largest count, each round: ManifestSyncs moved when one more
	// joined, and the ideal; seconds from the killed replica's Lease
	// expiry to the last of its ManifestSyncs Ready elsewhere; those
	// taken from it before its expiry; how many it owned.
	moved, ideal, late, early, killedOwned []float64
}

func newBench(ctx context.Context, c *harness.Cluster, cfg Config) (*bench, error) {
	b := &bench{c: c, cfg: cfg, engine: cfg.Engine, logs: cfg.Logs,
		ready: map[int][]float64{}, rss: map[int][]float64{}, anon: map[int][]float64{}, file: map[int][]float64{}, own: map[int][]float64{}, workers: map[int][]float64{},
		most: map[int][]float64{}, fewest: map[int][]float64{}, busy: map[int][]float64{}}
	if b.logs == "" {
		dir, err := os.MkdirTemp("", "bench-w9-")
		if err != nil {
			return nil, err
		}
		b.logs, b.tmp = dir, dir
	}
	if b.engine == "" {
		dir, err := os.MkdirTemp("", "bench-w9-image-")
		if err != nil {
			return nil, err
		}
		b.built = dir
		if b.engine, err = enginebuild.Image(ctx, c.Root, dir); err != nil {
			return nil, err
		}
	}
	b.worker = filepath.Join(filepath.Dir(b.engine), "engine-worker")
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	var err error
	if b.client, err = client.NewWithWatch(c.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	for _, ns := range append(namespaces(), leaseNS) {
		if err := b.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return b, b.reset(ctx)
}

func (b *bench) cleanupDir() {
	for _, d := range []string{b.tmp, b.built} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
}

func namespaces() []string {
	out := make([]string, spread)
	for i := range out {
		out[i] = fmt.Sprintf("bench-w9-%02d", i)
	}
	return out
}

// key is ManifestSync i's namespace and name.
func key(i int) types.NamespacedName {
	return types.NamespacedName{Namespace: namespaces()[i%spread], Name: fmt.Sprintf("sync-%04d", i)}
}

// program makes the ManifestSync's ConfigMaps, named after it.
var program = fmt.Sprintf(`
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "%%s-%%d" %% (ctx.params["name"], i)}, "data": {"v": ctx.params["v"]}} for i in range(%d)]
`, objects)

func manifestSync(k types.NamespacedName, v string) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, Labels: map[string]string{syncLabel: "sync"}},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: program}},
			Params:    &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"name": %q, "v": %q}`, k.Name, v)},
			Targets:   []v1alpha1.Target{{Name: "here", Namespace: k.Namespace}},
		},
	}
}

// reset deletes the ManifestSyncs (without their finalizers: no replica
// runs), their ConfigMaps and the Leases, so that each run starts alike.
func (b *bench) reset(ctx context.Context) error {
	var list v1alpha1.ManifestSyncList
	if err := b.client.List(ctx, &list, client.MatchingLabels{syncLabel: "sync"}); err != nil {
		return err
	}
	err := harness.Parallel(len(list.Items), setupWorkers, func(i int) error {
		ms := &list.Items[i]
		if len(ms.Finalizers) > 0 {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
			if err := b.client.Patch(ctx, ms, patch); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return client.IgnoreNotFound(b.client.Delete(ctx, ms))
	})
	if err != nil {
		return fmt.Errorf("deleting ManifestSyncs: %w", err)
	}
	for _, ns := range namespaces() {
		if err := b.client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("deleting the ConfigMaps of %s: %w", ns, err)
		}
	}
	if err := b.client.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(leaseNS)); err != nil {
		return fmt.Errorf("deleting the Leases: %w", err)
	}
	return nil
}

// run is one run of n replicas: from nothing to all Ready, and with full
// a join, a leave and a kill.
func (b *bench) run(ctx context.Context, round, n int, full bool) (err error) {
	if err := b.reset(ctx); err != nil {
		return err
	}
	tr, err := track(b.client)
	if err != nil {
		return err
	}
	defer tr.stop()
	reps := map[string]*replicaProc{}
	defer func() {
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Go(func() { r.stop(stopGrace) })
		}
		wg.Wait()
	}()
	start := func(id string) error {
		user := fmt.Sprintf("%sround%d-%dx-%s", userPrefix, round, n, id)
		kc, err := b.c.UserKubeconfig(user)
		if err != nil {
			return err
		}
		r, err := startReplica(b.engine, b.worker, kc, id, user, leaseNS, filepath.Join(b.logs, user+".log"))
		if err != nil {
			return err
		}
		reps[id] = r
		return nil
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
		if err := start(ids[i]); err != nil {
			return err
		}
	}
	// alive fails when a replica that should run has exited.
	alive := func(ids []string) error {
		for _, id := range ids {
			if r := reps[id]; !r.running() {
				return fmt.Errorf("replica %s exited: %v; %s", id, r.exitErr, r.tail())
			}
		}
		return nil
	}
	if err := b.waitLeases(ctx, ids, alive); err != nil {
		return err
	}

	// From nothing to all Ready.
	cpu0, err := harness.ReadCPUTimes()
	if err != nil {
		return err
	}
	begin := time.Now()
	err = harness.Parallel(b.cfg.Syncs, setupWorkers, func(i int) error {
		return b.client.Create(ctx, manifestSync(key(i), fmt.Sprintf("round-%d", round)))
	})
	if err != nil {
		return fmt.Errorf("creating ManifestSyncs: %w", err)
	}
	if err := b.waitAll(ctx, tr, ids, alive, nil, b.readyTimeout(n)); err != nil {
		return fmt.Errorf("%d replicas not all Ready: %w", n, err)
	}
	var last time.Time
	tr.mu.Lock()
	for _, s := range tr.syncs {
		last = maxTime(last, s.readyAt)
	}
	tr.mu.Unlock()
	b.ready[n] = append(b.ready[n], last.Sub(begin).Seconds())
	cpu1, err := harness.ReadCPUTimes()
	if err != nil {
		return err
	}
	b.busy[n] = append(b.busy[n], 100*cpu1.BusySince(cpu0))
	time.Sleep(settle)
	var peakRSS, peakAnon, peakFile, peakOwn int64
	peakWorkers := 0
	for _, id := range ids {
		rss, anon, file, own, workers := reps[id].mem.peaks()
		if rss > peakRSS {
			peakRSS, peakFile, peakWorkers = rss, file, workers
		}
		peakAnon, peakOwn = max(peakAnon, anon), max(peakOwn, own)
	}
	b.workers[n] = append(b.workers[n], float64(peakWorkers))
	b.rss[n] = append(b.rss[n], mib(peakRSS))
	b.own[n] = append(b.own[n], mib(peakOwn))
	b.anon[n] = append(b.anon[n], mib(peakAnon))
	b.file[n] = append(b.file[n], mib(peakFile))
	loads := map[string]int{}
	for _, o := range tr.owners() {
		loads[o]++
	}
	most, fewest := 0, b.cfg.Syncs
	for _, id := range ids {
		most, fewest = max(most, loads[id]), min(fewest, loads[id])
	}
	b.most[n] = append(b.most[n], float64(most))
	b.fewest[n] = append(b.fewest[n], float64(fewest))
	if !full {
		return nil
	}

	// One more joins: about 1/(n+1) move, each after its old owner let
	// go; then it stops again (SIGTERM), and its ManifestSyncs go back.
	before := tr.owners()
	joined := fmt.Sprintf("r%d", n+1)
	if err := start(joined); err != nil {
		return err
	}
	all := append(slices.Clone(ids), joined)
	if err := b.waitLeases(ctx, all, alive); err != nil {
		return err
	}
	if err := b.waitBalanced(ctx, tr, all, alive); err != nil {
		return fmt.Errorf("after %s joined: %w", joined, err)
	}
	moved := 0
	for k, o := range tr.owners() {
		if before[k] != o {
			moved++
		}
	}
	b.moved = append(b.moved, float64(moved))
	b.ideal = append(b.ideal, float64(b.cfg.Syncs)/float64(n+1))
	reps[joined].stop(stopGrace)
	delete(reps, joined)
	if err := b.waitBalanced(ctx, tr, ids, alive); err != nil {
		return fmt.Errorf("after %s stopped: %w", joined, err)
	}
	if n < 2 {
		return nil
	}

	// One that does not run the sharder is killed, and the params of its
	// ManifestSyncs change, so that each must sync again: only once its
	// Lease has expired and the sharder gave them to the others. (The
	// others' own ManifestSyncs stay as they are: the row times the
	// killed replica's share, not a change of every ManifestSync.)
	var leader coordinationv1.Lease
	if err := b.client.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: leaderLease}, &leader); err != nil {
		return fmt.Errorf("the sharder's Lease: %w", err)
	}
	victim := ""
	for _, id := range ids {
		if leader.Spec.HolderIdentity == nil || *leader.Spec.HolderIdentity != id {
			victim = id
		}
	}
	var owned []string
	for k, o := range tr.owners() {
		if o == victim {
			owned = append(owned, k)
		}
	}
	killed := time.Now()
	reps[victim].kill()
	delete(reps, victim)
	var l coordinationv1.Lease
	if err := b.client.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: shard.LeaseName(victim)}, &l); err != nil {
		return fmt.Errorf("the killed replica's Lease: %w", err)
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("the killed replica's Lease %s has no renewal", l.Name)
	}
	expiry := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	gens := make([]int64, len(owned))
	err = harness.Parallel(len(owned), setupWorkers, func(i int) error {
		namespace, name, _ := strings.Cut(owned[i], "/")
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		patch := fmt.Appendf(nil, `{"spec":{"params":{"v":"round-%d-changed"}}}`, round)
		if err := b.client.Patch(ctx, ms, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return err
		}
		gens[i] = ms.Generation
		return nil
	})
	if err != nil {
		return fmt.Errorf("changing the ManifestSyncs' params: %w", err)
	}
	want := make(map[string]int64, len(gens))
	for i, g := range gens {
		want[owned[i]] = g
	}
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == victim })
	if err := b.waitAll(ctx, tr, rest, alive, want, time.Until(expiry)+b.readyTimeout(n)); err != nil {
		return fmt.Errorf("after %s was killed: %w", victim, err)
	}
	last, early := time.Time{}, 0
	tr.mu.Lock()
	for _, k := range owned {
		if s := tr.syncs[k]; s != nil {
			last = maxTime(last, s.readyAt)
		}
	}
	for _, ch := range tr.changes {
		if ch.from == victim && ch.at.After(killed) && ch.at.Before(expiry) {
			early++
		}
	}
	tr.mu.Unlock()
	b.late = append(b.late, last.Sub(expiry).Seconds())
	b.early = append(b.early, float64(early))
	b.killedOwned = append(b.killedOwned, float64(len(owned)))
	return nil
}

// readyTimeout bounds the wait for n replicas to sync every ManifestSync.
func (b *bench) readyTimeout(int) time.Duration {
	return 2*time.Minute + time.Duration(b.cfg.Syncs)*600*time.Millisecond
}

// waitLeases waits until each of ids holds its Lease and one of them the
// sharder's.
func (b *bench) waitLeases(ctx context.Context, ids []string, alive func([]string) error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := alive(ids); err != nil {
			return err
		}
		var leases coordinationv1.LeaseList
		if err := b.client.List(ctx, &leases, client.InNamespace(leaseNS)); err != nil {
			return err
		}
		held := map[string]string{}
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil {
				held[l.Name] = *l.Spec.HolderIdentity
			}
		}
		missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return held[shard.LeaseName(id)] == id })
		if len(missing) == 0 && slices.Contains(ids, held[leaderLease]) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 2m: no Lease held by %v, or no sharder (leases %v)", missing, held)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAll waits until every ManifestSync is Ready at its generation (at
// least want's, when given), owned by one of ids, none draining.
func (b *bench) waitAll(ctx context.Context, tr *tracker, ids []string, alive func([]string) error, want map[string]int64, timeout time.Duration) error {
	return tr.wait(ctx, timeout, func(syncs map[string]*syncState) (bool, string) {
		if err := alive(ids); err != nil {
			return false, err.Error()
		}
		ready, owned := 0, 0
		for k, s := range syncs {
			if s.ready && s.generation >= want[k] {
				ready++
			}
			if slices.Contains(ids, s.owner) && s.drain == "" {
				owned++
			}
		}
		return len(syncs) == b.cfg.Syncs && ready == b.cfg.Syncs && owned == b.cfg.Syncs,
			fmt.Sprintf("%d ManifestSyncs, %d Ready, %d owned by %v", len(syncs), ready, owned, ids)
	})
}

// waitBalanced waits until every ManifestSync is owned by one of ids,
// none draining, and each of ids holds its share within the ring's bounds.
func (b *bench) waitBalanced(ctx context.Context, tr *tracker, ids []string, alive func([]string) error) error {
	lo, hi := shard.Bounds(b.cfg.Syncs, len(ids))
	return tr.wait(ctx, 3*time.Minute, func(syncs map[string]*syncState) (bool, string) {
		if err := alive(ids); err != nil {
			return false, err.Error()
		}
		loads := map[string]int{}
		for _, s := range syncs {
			if s.drain == "" {
				loads[s.owner]++
			}
		}
		ok := len(syncs) == b.cfg.Syncs
		for _, id := range ids {
			ok = ok && loads[id] >= lo && loads[id] <= hi
		}
		n := 0
		for _, id := range ids {
			n += loads[id]
		}
		return ok && n == b.cfg.Syncs, fmt.Sprintf("loads %v of %d, want each of %v within %d..%d", loads, len(syncs), ids, lo, hi)
	})
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
