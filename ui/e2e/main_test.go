// Package e2e holds the web UI's acceptance tests (issue 27): a real
// control plane (envtest's kube-apiserver and etcd, with
// kube-controller-manager, kube-scheduler and kwok so that Deployments roll
// out into ReplicaSets and Pods), the operator in process syncing some of
// the examples and ManifestSyncs of two teams from a git daemon on
// 127.0.0.1, the UI server in both modes, and Debian's Chromium, headless,
// driving it (internal/browsertest). One control plane and one browser
// serve the whole package: TestUI sets the scene once and runs its checks
// as subtests, in order (some act on what the previous ones left).
//
// The README's screenshots come from the same run:
//
//	go test ./ui/e2e -run TestUI -count=1 -update-screenshots   # docs/images/ui-*.png
//	UI_SCREENSHOTS=/tmp/shots go test ./ui/e2e -run TestUI -count=1
//
// It needs bin/envtest (make envtest) and chromium (hack/test-deps.sh);
// under -short it is skipped.
package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// env is the control plane of the package.
var env *testenv.Env

// timeout bounds every wait for the operator or the cluster (make test
// runs loaded); the UI's own promises (2 s for drift) have their own.
const timeout = 90 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env, testenv.WithWorkloads()))
}

// Secret values that must never leave the cluster through the UI: the
// replicate-secret example's source Secret and a Secret of team-a's git
// repository.
const (
	secretTLSKey = "tls-key-5d1f0c9e-never-shown"
	secretAPIKey = "api-key-8b2e47aa-never-shown"
	// secretEdited is what a hand edit puts in team-a's Secret.
	secretEdited = "edited-key-31c0d5f7-never-shown"
)

// The namespaces of the scene: the examples' ManifestSyncs are the
// platform team's (trusted, they write into namespaces of their own, named
// EXAMPLE-NS as the demo names them); team-a and team-b each have one
// ManifestSync writing into its own namespace.
const (
	platformNS = "platform"
	teamA      = "team-a"
	teamB      = "team-b"
)

// examples are those of examples/ the scene syncs: git sources rendered
// by Starlark, kustomize and CUE into a Deployment per target, and an
// object source (a Secret) copied into three namespaces. They need nothing
// beyond loopback.
var examples = []string{"starlark-app", "replicate-secret", "kustomize-overlay", "cue-app"}

// scene is what TestUI set up.
type scene struct {
	// syncs are the keys of every ManifestSync, examples first.
	syncs []client.ObjectKey
	// app is team-a's ManifestSync (drift Report, two commits in its
	// history); other is team-b's.
	app, other client.ObjectKey
	// commits are app's repository's commits, oldest first.
	commits []string
}

// setUp builds the scene: namespaces, the git daemon and its repositories,
// the operator and the ManifestSyncs, Ready.
func setUp(t *testing.T) *scene {
	t.Helper()
	ctx := context.Background()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	repos := gittest.TempDir(t)
	gitURL := gittest.Daemon(t, repos)
	for _, ns := range []string{platformNS, teamA, teamB} {
		ensureNamespace(t, ns)
	}
	startOperator(t, platformNS, teamA, teamB)

	sc := &scene{}
	for _, name := range examples {
		ms := prepareExample(t, root, name, repos, gitURL)
		createSync(t, ms)
		sc.syncs = append(sc.syncs, client.ObjectKeyFromObject(ms))
	}

	// team-a's application: a ConfigMap and a Secret from git, drift
	// reported rather than corrected (the drift test edits the ConfigMap
	// by hand), and a second commit so that its history has two entries.
	r := newRepo(t, repos, "team-a-app")
	sc.commits = append(sc.commits, r.commit(map[string]string{"app.yaml": teamAManifests("v1")}))
	app := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamA, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: gitURL + "/team-a-app.git", Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets: []v1alpha1.Target{{Name: "main", Namespace: teamA}},
			Policy:  v1alpha1.Policy{Drift: v1alpha1.DriftReport},
		},
	}
	createSync(t, app)
	sc.app = client.ObjectKeyFromObject(app)
	waitReady(t, sc.app)
	sc.commits = append(sc.commits, r.commit(map[string]string{"app.yaml": teamAManifests("v2")}))
	requestSync(t, sc.app)
	testenv.Eventually(t, timeout, func() error {
		ms := getSync(t, sc.app)
		if len(ms.Status.History) < 2 {
			return fmt.Errorf("%d history entries, want 2", len(ms.Status.History))
		}
		return readyErr(ms)
	})

	rb := newRepo(t, repos, "team-b-app")
	rb.commit(map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other-config}\ndata: {team: b}\n"})
	other := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "other"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: gitURL + "/team-b-app.git", Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets: []v1alpha1.Target{{Name: "main", Namespace: teamB}},
		},
	}
	createSync(t, other)
	sc.other = client.ObjectKeyFromObject(other)
	sc.syncs = append(sc.syncs, sc.app, sc.other)
	for _, key := range sc.syncs {
		waitReady(t, key)
	}
	_ = ctx
	return sc
}

// requestSync asks the operator to reconcile key now (it would see the
// new commit only at its next interval otherwise).
func requestSync(t *testing.T, key client.ObjectKey) {
	t.Helper()
	obj := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, webhook.RequestedAtAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	if err := env.Client.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatalf("requesting a sync of %s: %v", key, err)
	}
}

// teamAManifests is team-a's repository at a version: a ConfigMap, a
// Secret whose value is secretAPIKey and a Deployment.
func teamAManifests(version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {version: %q, greeting: hello}
---
apiVersion: v1
kind: Secret
metadata: {name: app-credentials}
data: {api-key: %q}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - {name: api, image: registry.example.com/team-a/api:1.0.0}
`, version, base64.StdEncoding.EncodeToString([]byte(secretAPIKey)))
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", name, err)
	}
}

func createSync(t *testing.T, ms *v1alpha1.ManifestSync) {
	t.Helper()
	env.CreateSync(t, ms, timeout)
}

func getSync(t *testing.T, key client.ObjectKey) *v1alpha1.ManifestSync {
	t.Helper()
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), key, ms); err != nil {
		t.Fatalf("ManifestSync %s: %v", key, err)
	}
	return ms
}

// readyErr is nil when ms is Ready (Synced) for its generation.
func readyErr(ms *v1alpha1.ManifestSync) error {
	c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case c == nil:
		return errors.New("no Ready condition")
	case c.ObservedGeneration != ms.Generation:
		return fmt.Errorf("Ready is of generation %d, want %d", c.ObservedGeneration, ms.Generation)
	case c.Status != metav1.ConditionTrue:
		return fmt.Errorf("Ready is %s (%s): %s", c.Status, c.Reason, c.Message)
	}
	return nil
}

func waitReady(t *testing.T, key client.ObjectKey) {
	t.Helper()
	testenv.Eventually(t, timeout, func() error {
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), key, ms); err != nil {
			return err
		}
		if err := readyErr(ms); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
}

// prepareExample reads examples/NAME/sync.yaml and makes it ready to sync
// here, as hack/demo does: named after its directory, its target
// namespaces prefixed with that name (and created), its git sources
// published on the daemon, its object sources created (the Secret of
// replicate-secret with a distinctive value of the test's).
func prepareExample(t *testing.T, root, name, repos, gitURL string) *v1alpha1.ManifestSync {
	t.Helper()
	dir := filepath.Join(root, "examples", name)
	b, err := os.ReadFile(filepath.Join(dir, "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sf, err := engine.LoadSyncFile(filepath.Join(dir, "sync.yaml"), b)
	if err != nil {
		t.Fatal(err)
	}
	ms := sf.Sync
	ms.Name = name
	ensureNamespace(t, ms.Namespace)
	for i := range ms.Spec.Targets {
		tg := &ms.Spec.Targets[i]
		if tg.Namespace == "" || tg.Cluster != nil || tg.NamespaceSelector != nil {
			t.Fatalf("example %s: target %s is not one namespace of this cluster", name, tg.Name)
		}
		tg.Namespace = name + "-" + tg.Namespace
		ensureNamespace(t, tg.Namespace)
	}
	for i := range ms.Spec.Sources {
		src := &ms.Spec.Sources[i]
		switch {
		case src.Git != nil:
			gittest.Publish(t, repos, name+"-"+src.Name, filepath.Join(dir, src.Name))
			src.Git.URL = gitURL + "/" + name + "-" + src.Name + ".git"
			src.Git.Path = ""
			src.Git.Ref = v1alpha1.GitRef{Branch: "main"}
			src.Git.SecretRef = nil
		case src.Object != nil && src.Object.Kind == "Secret":
			ns := src.Object.Namespace
			if ns == "" {
				ns = ms.Namespace
			}
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Object.Name},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{"tls.crt": []byte("not-a-certificate"), "tls.key": []byte(secretTLSKey)},
			}
			if err := env.Client.Create(context.Background(), secret); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		case src.Kustomize != nil:
			// Built by the engine from the source it names.
		default:
			t.Fatalf("example %s: source %s is of a kind the scene does not prepare", name, src.Name)
		}
	}
	return ms
}

// startOperator runs the operator's Reconciler in process, watching the
// ManifestSyncs of namespaces (all trusted), until the test ends.
func startOperator(t *testing.T, namespaces ...string) {
	t.Helper()
	scoped := map[string]cache.Config{}
	for _, ns := range namespaces {
		scoped[ns] = cache.Config{}
	}
	skip := true
	apiServer, err := controller.NewAPIServerProbe(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
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
	ctx, cancel := context.WithCancel(context.Background())
	r := &controller.Reconciler{
		Options: controller.Options{
			APIServer:         apiServer,
			TrustedNamespaces: namespaces,
			RetryMin:          100 * time.Millisecond,
			RetryMax:          time.Second,
		},
		Git: controller.NewGitProvider(""),
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the operator stopped with: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the operator's cache did not sync")
	}
}

// repo is a bare repository on the daemon with a work tree to commit to
// its branch main.
type repo struct {
	t          *testing.T
	bare, tree string
	env        []string
	n          int
}

func newRepo(t *testing.T, repos, name string) *repo {
	t.Helper()
	r := &repo{
		t: t, bare: filepath.Join(repos, name+".git"), tree: gittest.TempDir(t),
		env: []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + gittest.TempDir(t), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=ManifestSync", "GIT_AUTHOR_EMAIL=test@manifestsync.dev",
			"GIT_COMMITTER_NAME=ManifestSync", "GIT_COMMITTER_EMAIL=test@manifestsync.dev",
		},
	}
	r.git(repos, "init", "-q", "--bare", "-b", "main", r.bare)
	r.git(r.tree, "init", "-q", "-b", "main")
	return r
}

func (r *repo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	date := fmt.Sprintf("GIT_COMMITTER_DATE=2026-01-02T03:04:%02dZ", r.n)
	cmd.Env = append(slices.Clone(r.env), date, strings.Replace(date, "COMMITTER", "AUTHOR", 1))
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files into the work tree (replacing those of the same
// name), commits, pushes main and returns the commit's hash.
func (r *repo) commit(files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.tree, name), []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.n++
	r.git(r.tree, "add", "-A")
	r.git(r.tree, "commit", "-q", "-m", fmt.Sprintf("commit %d", r.n))
	r.git(r.tree, "push", "-q", r.bare, "main")
	return r.git(r.tree, "rev-parse", "HEAD")
}

// evaluator is the diff view's Evaluator for the tests: the sources read
// as the operator reads them (git from the daemon; object sources through
// the operator's own reader, as the user), evaluated in process. engine
// ui's own (cmd/engine) runs the evaluation in a sandboxed worker; what
// the page shows is the same.
type evaluator struct {
	git source.GitFetcher
	dc  discovery.DiscoveryInterface
}

func newEvaluator(t *testing.T) *evaluator {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &evaluator{git: controller.NewGitProvider("")(nil, nil), dc: dc}
}

func (e *evaluator) Evaluate(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error) {
	res := &source.Resolver{
		Namespace: ms.Namespace,
		Git:       e.git,
		Objects: func(*v1alpha1.Source) (source.ObjectReader, error) {
			return controller.ObjectReaderAs(ms, c, e.dc), nil
		},
	}
	snaps, err := res.Resolve(ctx, ms.Spec.Sources)
	if err != nil {
		return nil, err
	}
	return engine.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Snapshots: snaps, Name: ms.Name}, engine.Options{})
}

// serverLog records the lines a UI server logs, to look for tokens in.
type serverLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *serverLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 10})
}

func (l *serverLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// serve serves h on 127.0.0.1 until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}
