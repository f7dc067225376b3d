package controller

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

var (
	// env is the API server every test of the package shares.
	env *testenv.Env
	// reconciler is the one the manager runs; tests call it directly to
	// force resyncs.
	reconciler *Reconciler
	// recorded counts the events the reconciler records.
	recorded = &eventCounter{n: map[eventKey]int{}}
)

// eventCounter passes events on to the manager's recorder and counts them
// by ManifestSync and reason, so that a test tells an event recorded once
// from one recorded at every resync: the API server's events fold repeats
// into a series that is written back only every few minutes.
type eventCounter struct {
	recorder.EventRecorder
	mu sync.Mutex
	n  map[eventKey]int
}

type eventKey struct{ namespace, name, reason string }

func (c *eventCounter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if o, ok := regarding.(client.Object); ok {
		c.mu.Lock()
		c.n[eventKey{o.GetNamespace(), o.GetName(), reason}]++
		c.mu.Unlock()
	}
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// total is how many events were recorded, of every ManifestSync.
func (c *eventCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.n {
		n += k
	}
	return n
}

// count is how many events of the reason ms got.
func (c *eventCounter) count(ms *v1alpha1.ManifestSync, reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[eventKey{ms.Namespace, ms.Name, reason}]
}

// repos stands in for the git provider: it serves the snapshots of the
// URLs it holds and, like the operator without one, fails the others.
var repos = fakeRepos{
	"test://kustomize": {Revision: "main@sha1:4f2c0000", Files: map[string][]byte{
		"base/kustomization.yaml":          []byte("resources: [cm.yaml]\n"),
		"base/cm.yaml":                     []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {env: base}\n"),
		"overlays/prod/kustomization.yaml": []byte("resources: [../../base]\nnamePrefix: prod-\n"),
	}},
}

type fakeRepos map[string]*engine.Snapshot

// provider stands in for NewGitProvider.
func (f fakeRepos) provider(creds git.Credentials, _ git.Keyring) source.GitFetcher {
	return fakeFetcher{repos: f, creds: creds}
}

type fakeFetcher struct {
	repos fakeRepos
	creds git.Credentials
}

// FetchGit reads the source's secretRef, as git.Provider does, through
// the credentials the reconciler gives.
func (f fakeFetcher) FetchGit(ctx context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	if ref := src.SecretRef; ref != nil {
		if _, err := f.creds(ctx, *ref); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
	}
	if snap := f.repos[src.URL]; snap != nil {
		return snap, nil
	}
	return nil, fmt.Errorf("source %q: %w", name, source.ErrGitNotWired)
}

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env, testenv.Second(&remoteEnv), startOperator))
}

// operatorLogs is everything the operator logs, for tests that check what
// it must never log.
var operatorLogs gittest.Buffer

// newOperator makes a controller manager with its reconciler, as `engine
// operator` does (with its API server probe), with short retries; the
// reconciler's events go to recorded.
func newOperator(ctx context.Context, e *testenv.Env) (ctrl.Manager, *Reconciler, error) {
	skip := true
	apiServer, err := NewAPIServerProbe(e.Config)
	if err != nil {
		return nil, nil, err
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields(), NewInformer: apiServer.NewInformer},
	})
	if err != nil {
		return nil, nil, err
	}
	if err := apiServer.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	r := &Reconciler{
		Options: Options{
			// A platform team's operator: every namespace is trusted,
			// so that the tests of one behaviour write across namespaces
			// freely. The write gate's tests (tenants_test.go) run an
			// operator of their own, as the default install is.
			TrustedNamespaces: []string{"*"},
			RetryMin:          100 * time.Millisecond, RetryMax: 2 * time.Second,
			RemoteTimeout: 2 * time.Second, DeletionTimeout: deletionTimeout,
			Evaluator: evaluators,
			APIServer: apiServer,
			// Low, so that the tests of more than about 20 objects
			// read and write the gzipped inventory.
			InventoryGzipThreshold: testGzipThreshold,
		},
		Git:      repos.provider,
		Recorder: recorded,
	}
	if recorded.EventRecorder == nil {
		recorded.EventRecorder = mgr.GetEventRecorder(FieldManager)
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return nil, nil, err
	}
	return mgr, r, nil
}

// startOperator runs the controller manager against env, as `engine
// operator` does (with its API server probe), with short retries. MANIFESTSYNC_TEST_LOG=1 shows its logs.
func startOperator(e *testenv.Env) (func(), error) {
	var out io.Writer = &operatorLogs
	if os.Getenv("MANIFESTSYNC_TEST_LOG") != "" {
		out = io.MultiWriter(&operatorLogs, os.Stderr)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(out)))
	ctx, cancel := context.WithCancel(context.Background())
	mgr, r, err := newOperator(ctx, e)
	if err != nil {
		cancel()
		return nil, err
	}
	reconciler = r
	return testenv.StartManager(ctx, cancel, mgr)
}
