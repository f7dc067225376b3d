// Package w5 is workload W5 of `make bench`: 100 Git sources, each a
// ManifestSync reconciled by the operator's own reconciler and git
// provider (running in this process, so that its polls, fetches and
// evaluations can be counted), polled ten times with no change and then
// once more after one commit to one repository. The repositories are served
// on 127.0.0.1 by git http-backend, whose requests are counted by kind (ref
// listings, fetches); API writes are read from the API server's
// apiserver_request_total. Baselines: `git ls-remote` for a poll and
// `git clone --depth 1` for the fetch after the commit.
//
// Polls are Reconcile calls, the path the spec.interval requeue takes; the
// ManifestSyncs have an interval of an hour, so that the controller's own
// timer adds none during a measurement.
//
// It is a benchmark: nothing in the product may import it.
package w5

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/operator/controller"
)

const (
	workload  = "W5 git"
	sources   = 100
	polls     = 10
	workers   = 4 // the operator's default --concurrency
	namespace = "bench-w5"
)

// Run measures W5 on c, rounds times (at least 3).
func Run(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, error) {
	dir, err := os.MkdirTemp("", "bench-w5-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx = logr.NewContext(ctx, logr.Discard())
	b, err := setup(ctx, c, dir)
	if b != nil {
		defer func() { _ = b.close() }()
	}
	if err != nil {
		return nil, fmt.Errorf("w5: %w", err)
	}
	runs, err := harness.Rounds(rounds,
		func() (float64, error) { return b.unchanged(ctx) },
		func() (float64, error) { return b.lsRemote(ctx) },
		func() (float64, error) { return b.afterCommit(ctx) },
		func() (float64, error) { return b.clone(ctx) },
	)
	if err != nil {
		return nil, fmt.Errorf("w5: %w", err)
	}
	rows := b.rows(runs)
	if err := b.close(); err != nil {
		return rows, fmt.Errorf("w5: cleaning up: %w", err)
	}
	return rows, nil
}

// record is what the rounds measured beside the values they return.
type record struct {
	listings, requests, fetches, evals, writes []float64 // per unchanged phase (listings and requests per poll)
	lsListings, lsRequests                     []float64 // per git ls-remote
	fetchesAfter, evalsAfter, writesAfter      []float64 // the poll of every source after one commit
}

func (b *bench) rows(runs [][]float64) []harness.Row {
	rec := &b.rec
	equal := func(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
	every := func(r harness.Row, vs []float64, ok func(float64) bool) harness.Row {
		r.Pass = !slices.ContainsFunc(vs, func(v float64) bool { return !ok(v) })
		return r
	}
	unchanged := fmt.Sprintf("%d unchanged polls", sources*polls)
	listing := harness.Compare(workload, "ref listings per unchanged poll", "", rec.listings, rec.lsListings, "git ls-remote", "= 1", equal(1))
	listing = every(listing, rec.listings, equal(1))
	requests := harness.Compare(workload, "HTTP requests per unchanged poll", "", rec.requests, rec.lsRequests, "git ls-remote", "≤ git ls-remote", func(q float64) bool { return q <= 1 })
	pollTime := harness.Compare(workload, "time per unchanged poll (whole reconcile, 4 at once)", "ms", runs[0], runs[1], "git ls-remote (4 at once)", "≤ 1× git ls-remote", func(q float64) bool { return q <= 1 })
	fetch := harness.Compare(workload, "fetch after one commit", "ms", runs[2], runs[3], "git clone --depth 1", "≤ 2× clone", func(q float64) bool { return q <= 2 })
	rows := []harness.Row{
		listing,
		requests,
		every(harness.Absolute(workload, "fetches in "+unchanged, "", rec.fetches, "= 0", equal(0)), rec.fetches, equal(0)),
		every(harness.Absolute(workload, "evaluations in "+unchanged, "", rec.evals, "= 0", equal(0)), rec.evals, equal(0)),
		every(harness.Absolute(workload, "API writes in "+unchanged, "", rec.writes, "= 0", equal(0)), rec.writes, equal(0)),
		pollTime,
		fetch,
		every(harness.Absolute(workload, "fetches in the poll of all 100 after one commit", "", rec.fetchesAfter, "= 1", equal(1)), rec.fetchesAfter, equal(1)),
		every(harness.Absolute(workload, "evaluations after one commit", "", rec.evalsAfter, "= 1", equal(1)), rec.evalsAfter, equal(1)),
	}
	perRound := map[string][]float64{
		rows[0].Metric: rec.listings, rows[1].Metric: rec.requests, rows[2].Metric: rec.fetches,
		rows[3].Metric: rec.evals, rows[4].Metric: rec.writes, rows[7].Metric: rec.fetchesAfter, rows[8].Metric: rec.evalsAfter,
	}
	for i := range rows {
		if rows[i].Pass {
			continue
		}
		switch i {
		case 5:
			rows[i].Note = "ours is a whole reconcile (cache reads, steady-state checks of the target) around the ref listing, ls-remote only the listing; both are bound by git http-backend's process per request"
		case 6:
			rows[i].Note = "the fetch is one ref listing plus one upload-pack request (a thin depth-1 pack offering haves) served by git http-backend through CGI, then the snapshot's tree is read"
		default:
			rows[i].Note = fmt.Sprintf("per round: %v", perRound[rows[i].Metric])
		}
	}
	return rows
}

// bench is W5's setup: the repositories, their server, the ManifestSyncs
// and the reconciler.
type bench struct {
	c      *harness.Cluster
	dir    string
	root   string   // the bare repositories
	works  []string // the scratch directory of each repository's publication
	revs   []int    // the revision in each repository's ConfigMap
	server *gitServer
	client client.Client

	r       *controller.Reconciler
	sources *countingSources
	stop    context.CancelFunc
	done    chan error
	keys    []types.NamespacedName

	commits int
	rec     record
	closed  bool
}

func setup(ctx context.Context, c *harness.Cluster, dir string) (*bench, error) {
	b := &bench{c: c, dir: dir, root: filepath.Join(dir, "repos"), works: make([]string, sources), revs: make([]int, sources)}
	if err := os.MkdirAll(b.root, 0o755); err != nil {
		return nil, err
	}
	if err := b.publish(); err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	srv, err := startGitServer(b.root, home)
	if err != nil {
		return nil, err
	}
	b.server = srv

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return b, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return b, err
	}
	b.client, err = client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return b, err
	}
	if err := b.startOperator(ctx, scheme); err != nil {
		return b, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := b.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return b, err
	}
	for i := range sources {
		ms := manifestSync(i, srv.URL)
		if err := b.client.Create(ctx, ms); err != nil {
			return b, fmt.Errorf("creating ManifestSync %s: %w", ms.Name, err)
		}
		b.keys = append(b.keys, client.ObjectKeyFromObject(ms))
	}
	return b, b.waitReady(ctx, 3*time.Minute)
}

// manifestSync is the ManifestSync of repository i: its deploy directory
// applied to the workload's namespace, checked once an hour.
func manifestSync(i int, url string) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: repoName(i)},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{
				URL: url + "/" + repoName(i) + ".git", Ref: v1alpha1.GitRef{Branch: "main"}, Path: "deploy",
			}}},
			Targets:  []v1alpha1.Target{{Name: "here", Namespace: namespace}},
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
}

// startOperator runs the reconciler as `engine operator` does, with a
// manager of the same options, the git provider with an on-disk cache, and
// counters around its sources and evaluator.
func (b *bench) startOperator(ctx context.Context, scheme *runtime.Scheme) error {
	cfg := rest.CopyConfig(b.c.Config)
	cfg.QPS = -1 // the operator's default: no client-side limit
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		return err
	}
	cacheDir := filepath.Join(b.dir, "cache")
	b.sources = &countingSources{inner: controller.NewGitProvider(cacheDir), took: map[types.NamespacedName][]time.Duration{}}
	// The workload's namespace is trusted (a platform team's), as
	// the other benchmarks' operators trust theirs: the write gate's
	// reads are not what this measures.
	b.r = &controller.Reconciler{Git: b.sources.provider, Options: controller.Options{Concurrency: workers, TargetWorkers: 4, TrustedNamespaces: []string{namespace}}}
	mctx, stop := context.WithCancel(ctx)
	if err := b.r.SetupWithManager(mctx, mgr); err != nil {
		stop()
		return err
	}
	b.stop, b.done = stop, make(chan error, 1)
	go func() { b.done <- mgr.Start(mctx) }()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !mgr.GetCache().WaitForCacheSync(sctx) {
		return errors.New("the operator's cache did not sync within a minute")
	}
	return nil
}

// waitReady waits until every ManifestSync is Ready.
func (b *bench) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list v1alpha1.ManifestSyncList
		if err := b.client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return err
		}
		ready := 0
		var notReady string
		for i := range list.Items {
			if apimeta.IsStatusConditionTrue(list.Items[i].Status.Conditions, v1alpha1.ConditionReady) {
				ready++
			} else if c := apimeta.FindStatusCondition(list.Items[i].Status.Conditions, v1alpha1.ConditionReady); c != nil {
				notReady = list.Items[i].Name + ": " + c.Message
			}
		}
		if ready == sources {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d ManifestSyncs Ready after %s (%s)", ready, sources, timeout, notReady)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sample is every counter at one moment.
type sample struct {
	git   counts
	polls float64
	evals float64
	api   harness.APIRequests
}

func (b *bench) sample(ctx context.Context) (sample, error) {
	api, err := harness.ReadAPIRequests(ctx, b.c.Config)
	if err != nil {
		return sample{}, err
	}
	evals, err := evaluations()
	return sample{git: b.server.counts(), polls: float64(b.sources.polls.Load()), evals: evals, api: api}, err
}

// unchanged polls every source ten times and returns the time per poll.
func (b *bench) unchanged(ctx context.Context) (float64, error) {
	before, err := b.sample(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for range polls {
		if err := b.pollAll(ctx, b.keys); err != nil {
			return 0, err
		}
	}
	elapsed := time.Since(start)
	after, err := b.sample(ctx)
	if err != nil {
		return 0, err
	}
	n := after.polls - before.polls
	git := after.git.sub(before.git)
	b.rec.listings = append(b.rec.listings, git.Listings/n)
	b.rec.requests = append(b.rec.requests, git.Requests/n)
	b.rec.fetches = append(b.rec.fetches, git.Fetches)
	b.rec.evals = append(b.rec.evals, after.evals-before.evals)
	b.rec.writes = append(b.rec.writes, after.api.Sub(before.api).Writes())
	return harness.Ms(elapsed) / float64(sources*polls), nil
}

// pollAll reconciles keys, workers at a time, as the controller does.
func (b *bench) pollAll(ctx context.Context, keys []types.NamespacedName) error {
	return harness.Parallel(len(keys), workers, func(i int) error {
		_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: keys[i]})
		if err != nil {
			return fmt.Errorf("reconciling %s: %w", keys[i], err)
		}
		return nil
	})
}

// lsRemote runs git ls-remote once for every repository, workers at a time,
// and returns the time per repository.
func (b *bench) lsRemote(ctx context.Context) (float64, error) {
	before := b.server.counts()
	start := time.Now()
	err := harness.Parallel(sources, workers, func(i int) error {
		return b.git(ctx, b.dir, "ls-remote", b.server.URL+"/"+repoName(i)+".git")
	})
	if err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	git := b.server.counts().sub(before)
	b.rec.lsListings = append(b.rec.lsListings, git.Listings/sources)
	b.rec.lsRequests = append(b.rec.lsRequests, git.Requests/sources)
	return harness.Ms(elapsed) / sources, nil
}

// afterCommit commits to one repository, polls its ManifestSync and
// returns the time its fetch took; then it polls the others, so that the
// counts cover one poll of every source.
func (b *bench) afterCommit(ctx context.Context) (float64, error) {
	k := b.commits % sources
	b.commits++
	if err := b.commit(ctx, k); err != nil {
		return 0, err
	}
	before, err := b.sample(ctx)
	if err != nil {
		return 0, err
	}
	b.sources.reset(b.keys[k])
	if _, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: b.keys[k]}); err != nil {
		return 0, fmt.Errorf("reconciling %s after a commit: %w", b.keys[k], err)
	}
	took, ok := b.sources.first(b.keys[k])
	if !ok {
		return 0, fmt.Errorf("%s: no fetch after the commit", b.keys[k])
	}
	others := slices.Delete(slices.Clone(b.keys), k, k+1)
	if err := b.pollAll(ctx, others); err != nil {
		return 0, err
	}
	after, err := b.sample(ctx)
	if err != nil {
		return 0, err
	}
	b.rec.fetchesAfter = append(b.rec.fetchesAfter, after.git.sub(before.git).Fetches)
	b.rec.evalsAfter = append(b.rec.evalsAfter, after.evals-before.evals)
	b.rec.writesAfter = append(b.rec.writesAfter, after.api.Sub(before.api).Writes())
	var cm corev1.ConfigMap
	if err := b.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cfg-" + repoName(k)}, &cm); err != nil {
		return 0, err
	}
	if want := fmt.Sprint(b.revs[k]); cm.Data["revision"] != want {
		return 0, fmt.Errorf("ConfigMap %s has revision %q after the commit, want %q", cm.Name, cm.Data["revision"], want)
	}
	return harness.Ms(took), nil
}

// clone times git clone --depth 1 of the repository committed to last.
func (b *bench) clone(ctx context.Context) (float64, error) {
	k := (b.commits - 1 + sources) % sources
	dst := filepath.Join(b.dir, "clone")
	defer os.RemoveAll(dst)
	start := time.Now()
	if err := b.git(ctx, b.dir, "clone", "-q", "--depth", "1", "--branch", "main", b.server.URL+"/"+repoName(k)+".git", dst); err != nil {
		return 0, err
	}
	return harness.Ms(time.Since(start)), nil
}

// close deletes the ManifestSyncs (the reconciler prunes their objects),
// then stops the reconciler and the git server.
func (b *bench) close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	if b.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		errs = append(errs, b.deleteAll(ctx))
		b.stop()
		select {
		case err := <-b.done:
			errs = append(errs, err)
		case <-ctx.Done():
			errs = append(errs, errors.New("the reconciler did not stop"))
		}
	}
	if b.server != nil {
		errs = append(errs, b.server.close())
	}
	return errors.Join(errs...)
}

func (b *bench) deleteAll(ctx context.Context) error {
	err := b.client.DeleteAllOf(ctx, &v1alpha1.ManifestSync{}, client.InNamespace(namespace))
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		var list v1alpha1.ManifestSyncList
		if err := b.client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d ManifestSyncs not finalized: %w", len(list.Items), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// countingSources counts the polls of the git provider and times them.
type countingSources struct {
	inner controller.GitProvider
	polls atomic.Int64

	mu   sync.Mutex
	took map[types.NamespacedName][]time.Duration
}

// provider is the git provider of a reconcile, counted.
func (s *countingSources) provider(creds git.Credentials, keys git.Keyring) source.GitFetcher {
	return countedFetcher{s: s, inner: s.inner(creds, keys)}
}

type countedFetcher struct {
	s     *countingSources
	inner source.GitFetcher
}

// FetchGit times the fetch of the repository of one ManifestSync: the
// repository has its name.
func (c countedFetcher) FetchGit(ctx context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	start := time.Now()
	snap, err := c.inner.FetchGit(ctx, name, src)
	d := time.Since(start)
	c.s.polls.Add(1)
	key := types.NamespacedName{Namespace: namespace, Name: strings.TrimSuffix(path.Base(src.URL), ".git")}
	c.s.mu.Lock()
	c.s.took[key] = append(c.s.took[key], d)
	c.s.mu.Unlock()
	return snap, err
}

func (s *countingSources) reset(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.took, key)
}

// first is how long the first fetch of key since reset took. Reconciles
// of one ManifestSync take turns, so it is that of the first reconcile.
func (s *countingSources) first(key types.NamespacedName) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.took[key]) == 0 {
		return 0, false
	}
	return s.took[key][0], true
}

// evaluations is how many evaluations the reconciler has made, as its
// metric manifestsync_eval_duration_seconds counts them (whether they ran
// in process or in a worker).
func evaluations() (float64, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, f := range families {
		if f.GetName() != "manifestsync_eval_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return float64(n), nil
}
