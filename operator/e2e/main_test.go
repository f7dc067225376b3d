package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// env is the API server every test of the package shares.
var env *testenv.Env

// timeout bounds every wait for an operator: it only stops a wait for what
// never comes (make test runs at load 15 on 2 cores; speed is make bench's).
const timeout = time.Minute

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env))
}

// operator is a controller manager running one Reconciler, with real git
// sources (cached in memory), that sees only the ManifestSyncs of its
// namespaces, so that the operators of several tests, or of one test, do
// not reconcile each other's. Like engine operator, it probes the API
// server (its readiness checks are served at probeURL). MANIFESTSYNC_TEST_LOG=1
// shows its logs.
type operator struct {
	mgr ctrl.Manager
	// probeURL is the base URL of its /healthz and /readyz.
	probeURL string
	// logs are the lines its manager logged.
	logs *logLines
}

func startOperator(t *testing.T, opts controller.Options, namespaces ...string) *operator {
	t.Helper()
	show := os.Getenv("MANIFESTSYNC_TEST_LOG") != ""
	if show {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	logs := &logLines{show: show}
	skip := true
	scoped := map[string]cache.Config{}
	for _, ns := range namespaces {
		scoped[ns] = cache.Config{}
	}
	apiServer, err := controller.NewAPIServerProbe(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	probeAddr := testenv.FreeAddr(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Logger:                 funcr.New(logs.add, funcr.Options{}),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probeAddr,
		Controller:             config.Controller{SkipNameValidation: &skip},
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Namespaces: scoped}},
			NewInformer:      apiServer.NewInformer,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := apiServer.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	opts.APIServer = apiServer
	if opts.TrustedNamespaces == nil {
		// Its namespaces are a platform team's, trusted to write into
		// the test's target namespaces, as `engine operator` trusts its
		// own; the write gate is tested in operator/controller.
		opts.TrustedNamespaces = namespaces
	}
	if opts.RetryMin == 0 {
		opts.RetryMin, opts.RetryMax = 100*time.Millisecond, time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &controller.Reconciler{Options: opts, Git: controller.NewGitProvider("")}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
	return &operator{mgr: mgr, probeURL: "http://" + probeAddr, logs: logs}
}

// logLines records the lines of a funcr logger (and prints them when
// show is set).
type logLines struct {
	show  bool
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	line := prefix + " " + args
	if l.show {
		fmt.Fprintln(os.Stderr, line)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

// with are the lines that hold every one of substrings.
func (l *logLines) with(substrings ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if !slices.ContainsFunc(substrings, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

// eventually calls cond every 50ms until it returns nil, and fails the test
// with its last error when within has passed.
var eventually = testenv.Eventually

// createSync creates ms and, when the test ends, deletes it and waits until
// its operator (still running: cleanups run last-in first-out) has
// finalized it.
func createSync(t *testing.T, ms *v1alpha1.ManifestSync) {
	t.Helper()
	env.CreateSync(t, ms, timeout)
}

// waitFor waits until ms's Ready condition has the reason, for its current
// generation, and returns the ManifestSync.
func waitFor(t *testing.T, key types.NamespacedName, reason string) *v1alpha1.ManifestSync {
	t.Helper()
	return env.WaitForReason(t, key, reason, timeout)
}

// configMapData returns data[key] of a ConfigMap, or why it cannot.
func configMapData(ns, name, key string) (string, error) {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return "", err
	}
	v, ok := cm.Data[key]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s/%s has no %s", ns, name, key)
	}
	return v, nil
}

// hasData is a condition: the ConfigMap's data[key] is value.
func hasData(ns, name, key, value string) func() error {
	return func() error {
		got, err := configMapData(ns, name, key)
		if err != nil {
			return err
		}
		if got != value {
			return fmt.Errorf("ConfigMap %s/%s: %s is %q, want %q", ns, name, key, got, value)
		}
		return nil
	}
}

// absent is a condition: the object does not exist.
func absent(obj client.Object) func() error {
	return func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("%s/%s still exists", obj.GetNamespace(), obj.GetName())
	}
}

// repo is a bare git repository published by a git daemon, with a work
// tree to commit to its branch main.
type repo struct {
	t    *testing.T
	bare string
	tree string
	env  []string
	n    int
	// URL is the repository's git:// URL.
	URL string
}

// newRepo starts a git daemon on 127.0.0.1 serving a new, empty
// repository.
func newRepo(t *testing.T) *repo {
	t.Helper()
	root := t.TempDir()
	r := &repo{
		t:    t,
		bare: filepath.Join(root, "config.git"),
		tree: t.TempDir(),
		env: []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=ManifestSync", "GIT_AUTHOR_EMAIL=test@manifestsync.dev",
			"GIT_COMMITTER_NAME=ManifestSync", "GIT_COMMITTER_EMAIL=test@manifestsync.dev",
		},
	}
	r.git(root, "init", "-q", "--bare", "-b", "main", r.bare)
	r.git(r.tree, "init", "-q", "-b", "main")
	r.URL = gittest.Daemon(t, root) + "/config.git"
	return r
}

func (r *repo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	// Distinct, fixed dates: each commit's hash is the same on every run.
	date := fmt.Sprintf("GIT_COMMITTER_DATE=2026-01-02T03:04:%02dZ", r.n)
	cmd.Env = append(r.env, date, strings.Replace(date, "COMMITTER", "AUTHOR", 1))
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit replaces the work tree's files with files, commits them, pushes
// main and returns the commit's hash.
func (r *repo) commit(files map[string]string) string {
	r.t.Helper()
	entries, err := os.ReadDir(r.tree)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			if err := os.RemoveAll(filepath.Join(r.tree, e.Name())); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	for name, content := range files {
		path := filepath.Join(r.tree, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.n++
	r.git(r.tree, "add", "-A")
	r.git(r.tree, "commit", "-q", "--allow-empty", "-m", fmt.Sprintf("commit %d", r.n))
	r.git(r.tree, "push", "-q", r.bare, "main")
	return r.git(r.tree, "rev-parse", "HEAD")
}

// configMap is a ConfigMap manifest with one data key.
func configMap(name, key, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {%s: %q}\n", name, key, value)
}
