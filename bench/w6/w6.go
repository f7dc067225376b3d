// Package w6 is workloads W6, W8 and W10 of `make bench`: memory. W8, the
// object set fan-out, is in objectset.go; W10, 1,000 Helm releases, in
// helm.go.
//
// In W6 the cluster holds
// 10,000 Secrets (100 of them 100 KiB) in 1,000 labelled namespaces, and
// one source Secret is replicated to those namespaces by a ManifestSync
// (an object source and a namespaceSelector target) run by `engine
// operator` as a process of its own. Measured: its peak resident set (with
// that of its evaluation workers, if any start) and the time from its
// start until every target is Synced; reported beside them, the peak of
// the anonymous part of the resident set (RssAnon), which leaves out the
// pages of the executable itself. Baseline: a replicator written the obvious way with
// controller-runtime, whose cached client holds every Secret in full
// (bench/w6/naive), doing the same replication.
//
// The Secrets are created once; each round deletes the copies and starts
// only the controller under test.
//
// It is a benchmark: nothing in the product may import it.
package w6

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

const (
	workload    = "W6 memory"
	namespaces  = 1000
	perNS       = 10  // Secrets in each namespace: 10,000 in all
	large       = 100 // of them 100 KiB
	largeSize   = 100 << 10
	setupWorker = 16

	srcNamespace = "bench-w6-src"
	srcName      = "shared"
	msName       = "replicate"
	targetLabel  = "bench.manifestsync.dev/w6"
	naiveLabel   = "bench.manifestsync.dev/naive-copy" // bench/w6/naive's

	// settle is how long a controller keeps running after it is ready
	// before its memory is read: the peak includes what follows the last
	// write (status, events, resyncs).
	settle = 2 * time.Second
	// readyTimeout bounds the wait for a controller to finish.
	readyTimeout = 3 * time.Minute
)

// OperatorFlags are the flags `engine operator` runs with, beyond the
// kubeconfig and disabled endpoints: none (its defaults), unless
// $BENCH_W6_OPERATOR_FLAGS adds some, separated by spaces, such as
// "--pprof-bind-address 127.0.0.1:6060" to profile it.
var OperatorFlags = strings.Fields(os.Getenv("BENCH_W6_OPERATOR_FLAGS"))

func nsName(i int) string { return fmt.Sprintf("bench-w6-%04d", i) }

// Run measures W6 on c, rounds times (at least 3).
func Run(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, error) {
	dir, err := os.MkdirTemp("", "bench-w6-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b, err := setup(ctx, c, dir)
	if err != nil {
		return nil, fmt.Errorf("w6: %w", err)
	}
	runs, err := harness.Rounds(rounds, func() (float64, error) { return b.ours(ctx) }, func() (float64, error) { return b.naive(ctx) })
	if err != nil {
		return nil, errors.Join(fmt.Errorf("w6: %w", err), b.cleanup(ctx))
	}
	rows := b.rows(runs)
	if err := b.cleanup(ctx); err != nil {
		return rows, fmt.Errorf("w6: cleaning up: %w", err)
	}
	return rows, nil
}

type bench struct {
	c *harness.Cluster
	// srcNS and ms name the ManifestSync under test, ready when its
	// targets (a count) are all Synced.
	srcNS, ms string
	targets   int
	dir       string
	engine    string // bin/engine
	naiveBin  string
	client    client.WithWatch
	srcData   map[string][]byte
	own, kids []float64 // the operator's own peak and its workers', MiB
	// anon and file are, of ours [0] and the other sides [1:], the peak
	// anonymous memory (RssAnon, with the workers') and the process's
	// file-backed pages (RssFile), MiB.
	anon, file [4][]float64
	// pss is the peak of the tree's proportional set size, MiB, by side.
	pss [4][]float64

	oursReady, naiveReady []float64 // seconds
	// W8's, by side: rounds run, seconds until every copy was made,
	// whether each round's status recorded every target Synced.
	w8Rounds              [4]int
	w8Ready               [4][]float64
	w8Status              [4][]bool
	oursRound, naiveRound int
}

func (b *bench) rows(runs [][]float64) []harness.Row {
	baseline := "controller-runtime replicator caching full Secrets"
	rss := harness.Compare(workload, "peak RSS (operator + eval workers)", "MiB", runs[0], runs[1], baseline, "≤ 0.25× and ≤ 80 MiB", func(q float64) bool { return q <= 0.25 })
	rss.Pass = rss.Pass && rss.Ours <= 80
	ready := harness.Compare(workload, fmt.Sprintf("ready after start (%d/%d targets Synced)", namespaces, namespaces), "s", b.oursReady, b.naiveReady, baseline, "≤ 5 s", nil2)
	ready.Pass = ready.Ours <= 5
	anon := harness.Compare(workload, "peak anonymous memory (RssAnon, operator + eval workers)", "MiB", b.anon[0], b.anon[1], baseline, "reported", nil)
	if !rss.Pass {
		workers := "No evaluation worker started (this ManifestSync runs no program of its user)"
		if k := harness.Median(b.kids); k > 0 {
			workers = fmt.Sprintf("Its evaluation worker processes (--eval-workers, each a process of engine-worker) peak at %.1f MiB together", k)
		}
		rss.Note = fmt.Sprintf("median %.1f MiB against %.1f MiB. The resident sets include file-backed pages (RssFile), mostly those of each side's executable, which this machine's kernel maps in large folios: "+
			"of the operator's own peak (%.1f MiB), %.1f MiB are file-backed (the image's engine is %.0f MiB on disk), and its anonymous memory (heap, stacks) peaks at %.1f MiB; "+
			"the baseline's executable is %.0f MiB on disk, %.1f MiB of its resident set are file-backed, and its anonymous memory peaks at %.1f MiB. "+
			"%s. The operator caches the metadata of the 1,000 namespaces, of its 1,000 copies and of the source's namespace's Secrets, the ManifestSync (whose status and inventory list 1,000 targets) and the evaluation result of 1,000 objects",
			rss.Ours, rss.Base, harness.Median(b.own), harness.Median(b.file[0]), fileMiB(b.engine), anon.Ours,
			fileMiB(b.naiveBin), harness.Median(b.file[1]), anon.Base, workers)
	}
	if !ready.Pass {
		ready.Note = fmt.Sprintf("median %.1f s to apply 1,000 objects and report them; flags: %v (defaults: no client-side rate limit, --target-concurrency 8: two requests per target, a read and an apply, 8 targets at once; the API server, sharing the 2 cores, is the bottleneck)", ready.Ours, OperatorFlags)
	}
	return []harness.Row{rss, anon, ready}
}

// fileMiB is the size of a file, in MiB; 0 when it cannot be read.
func fileMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return mib(fi.Size())
}

func nil2(float64) bool { return true }

func setup(ctx context.Context, c *harness.Cluster, dir string) (*bench, error) {
	b, err := newBench(ctx, c, dir, srcNamespace, msName, namespaces, true)
	if err != nil {
		return nil, err
	}
	return b, b.populate(ctx)
}

// newBench builds the image's engine and its worker into dir/image (and
// the baseline, with naive) and a client of c, for a ManifestSync ns/ms
// with targets targets.
func newBench(ctx context.Context, c *harness.Cluster, dir, ns, ms string, targets int, naive bool) (*bench, error) {
	b := &bench{c: c, srcNS: ns, ms: ms, targets: targets, dir: dir, naiveBin: filepath.Join(dir, "naive")}
	// Both as an image ships them: static (CGO_ENABLED=0), and the engine
	// the lean one with its worker beside it (enginebuild.Image).
	var err error
	if b.engine, err = enginebuild.Image(ctx, c.Root, filepath.Join(dir, "image")); err != nil {
		return nil, err
	}
	if naive {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.naiveBin, "./bench/w6/naive")
		cmd.Dir, cmd.Env = c.Root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%v: %w\n%s", cmd.Args, err, out)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	b.client, err = client.NewWithWatch(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// populate creates the namespaces, the 10,000 Secrets and the source,
// setupWorker requests at a time; what exists already is kept.
func (b *bench) populate(ctx context.Context) error {
	create := func(o client.Object) error {
		if err := b.client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
		}
		return nil
	}
	b.srcData = map[string][]byte{"tls.crt": random(2 << 10), "tls.key": random(1 << 10)}
	if err := create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: srcNamespace}}); err != nil {
		return err
	}
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: srcNamespace, Name: srcName}, Data: b.srcData}
	err := b.client.Create(ctx, src)
	if apierrors.IsAlreadyExists(err) {
		err = b.client.Update(ctx, src)
	}
	if err != nil {
		return err
	}
	return harness.Parallel(namespaces, setupWorker, func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{targetLabel: "target"}}}
		if err := create(ns); err != nil {
			return err
		}
		for j := range perNS {
			data := map[string][]byte{"token": random(64), "ca.crt": random(512)}
			if j == 0 && i < large {
				data = map[string][]byte{"blob": random(largeSize)}
			}
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsName(i), Name: fmt.Sprintf("filler-%d", j)}, Data: data}
			if err := create(s); err != nil {
				return err
			}
		}
		return nil
	})
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// reset deletes the ManifestSync (without its finalizer: no operator
// runs) and every copy, so that each round starts alike.
func (b *bench) reset(ctx context.Context) error {
	if err := b.deleteManifestSync(ctx); err != nil {
		return err
	}
	return harness.Parallel(namespaces, setupWorker, func(i int) error {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsName(i), Name: srcName}}
		return client.IgnoreNotFound(b.client.Delete(ctx, s))
	})
}

// deleteManifestSync deletes the ManifestSync under test, without its
// finalizer (no operator runs).
func (b *bench) deleteManifestSync(ctx context.Context) error {
	return b.deleteSync(ctx, types.NamespacedName{Namespace: b.srcNS, Name: b.ms})
}

// deleteSync deletes the ManifestSync key names, without its finalizer.
func (b *bench) deleteSync(ctx context.Context, key types.NamespacedName) error {
	ms := &v1alpha1.ManifestSync{}
	if err := b.client.Get(ctx, key, ms); err != nil {
		return client.IgnoreNotFound(err)
	}
	if len(ms.Finalizers) > 0 {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := b.client.Patch(ctx, ms, patch); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return client.IgnoreNotFound(b.client.Delete(ctx, ms))
}

// ours runs the operator until the ManifestSync is ready, and returns its
// peak RSS in MiB.
func (b *bench) ours(ctx context.Context) (float64, error) {
	if err := b.reset(ctx); err != nil {
		return 0, err
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: srcNamespace, Name: msName},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: srcName}}},
			Targets: []v1alpha1.Target{{Name: "all", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{targetLabel: "target"}}}},
		},
	}
	b.oursRound++
	rss, took, err := b.operator(ctx, ms, fmt.Sprintf("operator-%d.log", b.oursRound), b.waitSynced, nil, 0)
	if err != nil {
		return 0, err
	}
	b.oursReady = append(b.oursReady, took.Seconds())
	return rss, nil
}

// operator creates ms and runs `engine operator` until ready; see measure.
func (b *bench) operator(ctx context.Context, ms *v1alpha1.ManifestSync, logName string, ready, after func(context.Context) error, side int) (float64, time.Duration, error) {
	if err := b.client.Create(ctx, ms); err != nil {
		return 0, 0, err
	}
	// Its ManifestSyncs are a platform team's, trusted to write into
	// every namespace they select (see harness.TrustAll).
	args := append([]string{"operator", "--kubeconfig", b.c.Kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", harness.TrustAll}, OperatorFlags...)
	return b.measure(ctx, exec.Command(b.engine, args...), logName, ready, after, side)
}

// naive runs the baseline until every copy is made, and returns its peak
// RSS in MiB.
func (b *bench) naive(ctx context.Context) (float64, error) {
	if err := b.reset(ctx); err != nil {
		return 0, err
	}
	b.naiveRound++
	cmd := exec.Command(b.naiveBin, "--kubeconfig", b.c.Kubeconfig, "--source", srcNamespace+"/"+srcName, "--selector", targetLabel+"=target")
	rss, took, err := b.measure(ctx, cmd, fmt.Sprintf("naive-%d.log", b.naiveRound), b.waitCopies, nil, 1)
	if err != nil {
		return 0, err
	}
	b.naiveReady = append(b.naiveReady, took.Seconds())
	return rss, nil
}

// measure starts cmd, waits for ready (which watches from before the
// start), lets it settle, reads its peak RSS, runs after (if not nil: what
// is timed on the running controller once its memory is read) and stops
// it. side is 0 for ours, 1 and above for the others.
func (b *bench) measure(ctx context.Context, cmd *exec.Cmd, logName string, ready, after func(context.Context) error, side int) (float64, time.Duration, error) {
	logPath := filepath.Join(b.dir, logName)
	log, err := os.Create(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		err := ready(wctx)
		waited <- err
	}()
	// ready's watch is open before the start: nothing is missed.
	time.Sleep(100 * time.Millisecond)
	// Started as a pod starts it: its binary read in from the disk.
	if err := harness.Evict(cmd.Path); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // evaluation workers left behind, if any
	}
	sampler := sampleRSS(cmd.Process.Pid, 50*time.Millisecond)
	var took time.Duration
	select {
	case err := <-waited:
		took = time.Since(start)
		if err != nil {
			_, _ = sampler.finish()
			stop()
			return 0, 0, fmt.Errorf("%s: %w (log: %s)", filepath.Base(cmd.Path), err, tail(logPath))
		}
	case <-exited:
		_, _ = sampler.finish()
		return 0, 0, fmt.Errorf("%s exited: %w (log: %s)", filepath.Base(cmd.Path), exitErr, tail(logPath))
	}
	time.Sleep(settle)
	p, err := sampler.finish()
	if err == nil && after != nil {
		if err = after(ctx); err != nil {
			err = fmt.Errorf("%w (log: %s)", err, tail(logPath))
		}
	}
	stop()
	if err != nil {
		return 0, 0, err
	}
	if side == 0 { // ours
		b.own = append(b.own, mib(p.own))
		b.kids = append(b.kids, mib(p.children))
	}
	b.anon[side] = append(b.anon[side], mib(p.anon))
	b.file[side] = append(b.file[side], mib(p.file))
	b.pss[side] = append(b.pss[side], mib(p.pss))
	return mib(p.total), took, nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func tail(path string) string {
	raw, _ := os.ReadFile(path)
	if len(raw) > 2000 {
		raw = raw[len(raw)-2000:]
	}
	return string(raw)
}

// waitSynced waits until the ManifestSync is Ready with every target
// Synced, watching it.
func (b *bench) waitSynced(ctx context.Context) error {
	var list v1alpha1.ManifestSyncList
	w, err := b.client.Watch(ctx, &list, client.InNamespace(b.srcNS), client.MatchingFields{"metadata.name": b.ms})
	if err != nil {
		return err
	}
	defer w.Stop()
	want := fmt.Sprintf("%d/%d", b.targets, b.targets)
	last := "no status"
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ManifestSync not ready (%s): %w", last, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the ManifestSync ended")
			}
			ms, isMS := ev.Object.(*v1alpha1.ManifestSync)
			if !isMS || ev.Type == watch.Deleted {
				continue
			}
			st := ms.Status
			if c := apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c != nil {
				last = fmt.Sprintf("%s %s: %s, targets %s", c.Status, c.Reason, c.Message, st.TargetsSummary)
			}
			if st.ObservedGeneration == ms.Generation && st.TargetsSummary == want &&
				apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) {
				return nil
			}
		}
	}
}

// waitCopies waits until the baseline has made every copy, watching them.
func (b *bench) waitCopies(ctx context.Context) error {
	var list corev1.SecretList
	w, err := b.client.Watch(ctx, &list, client.HasLabels{naiveLabel})
	if err != nil {
		return err
	}
	defer w.Stop()
	done := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d copies made: %w", len(done), namespaces, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the copies ended")
			}
			s, isSecret := ev.Object.(*corev1.Secret)
			if !isSecret || ev.Type == watch.Deleted {
				continue
			}
			done[s.Namespace] = string(s.Data["tls.crt"]) == string(b.srcData["tls.crt"])
			n := 0
			for _, ok := range done {
				if ok {
					n++
				}
			}
			if n == namespaces {
				return nil
			}
		}
	}
}

// cleanup deletes what the workload made, but the namespaces (which a
// control plane without a namespace controller never finishes deleting).
func (b *bench) cleanup(ctx context.Context) error {
	if err := b.reset(ctx); err != nil {
		return err
	}
	err := harness.Parallel(namespaces, setupWorker, func(i int) error {
		return client.IgnoreNotFound(b.client.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(nsName(i))))
	})
	return errors.Join(err, client.IgnoreNotFound(b.client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: srcNamespace, Name: srcName}})))
}
