package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/go-logr/logr"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The diff tests share one API server with the operator running on it,
// started by the first test that needs it (so that the other tests of the
// package do not wait for it) and stopped after all of them. The assets
// are those of operator/internal/testenv (which this package may not
// import): $KUBEBUILDER_ASSETS, else bin/envtest (make envtest).
var cluster struct {
	once sync.Once
	env  *testenv.Env
	// kubeconfig is a file with two contexts: envtest, and the current
	// one, broken, whose server refuses connections.
	kubeconfig string
	stop       func()
	err        error
}

// clusterM runs the tests, then stops the API server if one was started.
type clusterM struct{ m *testing.M }

func (c clusterM) Run() int {
	code := c.m.Run()
	if cluster.stop != nil {
		cluster.stop()
	}
	return code
}

// needCluster starts the API server and the operator once, or skips the
// test under -short.
func needCluster(t *testing.T) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped under -short")
	}
	cluster.once.Do(func() { cluster.err = startCluster() })
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.env
}

func startCluster() error {
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return errors.Join(err, env.Stop())
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &controller.Reconciler{
		// A platform team's operator: its ManifestSyncs write into
		// other namespaces (the write gate is the operator's tests').
		Options: controller.Options{RetryMin: 100 * time.Millisecond, RetryMax: time.Second, TrustedNamespaces: []string{"*"}},
		Git:     repos.provider,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		return errors.Join(err, env.Stop())
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	cluster.env = env
	cluster.stop = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "the manager stopped with: %v\n", err)
		}
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the API server: %v\n", err)
		}
	}
	dir, err := os.MkdirTemp("", "diff-test")
	if err != nil {
		return err
	}
	cluster.kubeconfig = filepath.Join(dir, "kubeconfig")
	return writeKubeconfig(cluster.kubeconfig, env.Config, "https://127.0.0.1:"+closedPort())
}

// writeKubeconfig writes a kubeconfig of cfg's server (context envtest)
// and of a broken one (context broken, the current one).
func writeKubeconfig(path string, cfg *rest.Config, broken string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.Clusters["broken"] = &clientcmdapi.Cluster{Server: broken, InsecureSkipTLSVerify: true}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.Contexts["broken"] = &clientcmdapi.Context{Cluster: "broken", AuthInfo: "admin"}
	kc.CurrentContext = "broken"
	return clientcmd.WriteToFile(*kc, path)
}

// closedPort is a loopback port nothing listens on.
func closedPort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "1"
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// repos stands in for the git provider for test:// URLs: each test's
// repository, by URL, as it was when the ManifestSync was created. Other
// URLs are fetched by the operator's own provider.
var repos = &testRepos{snaps: map[string]*engine.Snapshot{}, fetch: controller.NewGitProvider("")}

type testRepos struct {
	mu    sync.Mutex
	snaps map[string]*engine.Snapshot
	fetch controller.GitProvider
}

func (r *testRepos) provider(creds git.Credentials, keys git.Keyring) source.GitFetcher {
	return testFetcher{repos: r, fetch: r.fetch(creds, keys)}
}

type testFetcher struct {
	repos *testRepos
	fetch source.GitFetcher
}

func (f testFetcher) FetchGit(ctx context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	if !strings.HasPrefix(src.URL, "test://") {
		return f.fetch.FetchGit(ctx, name, src)
	}
	f.repos.mu.Lock()
	defer f.repos.mu.Unlock()
	if snap := f.repos.snaps[src.URL]; snap != nil {
		return snap, nil
	}
	return nil, fmt.Errorf("no repository %s", src.URL)
}

// syncYAML is a ManifestSync of the objects of repo/ into its own
// namespace.
const syncYAML = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: %[1]s}
spec:
  sources:
  - name: repo
    git: {url: "test://%[1]s"}
  targets:
  - name: dev
    namespace: %[1]s
`

// newSyncDir writes sync.yaml and repo/ (files by name) in a new
// directory, for a ManifestSync in a new namespace; it returns the
// directory and the namespace.
func newSyncDir(t *testing.T, env *testenv.Env, files map[string]string) (dir, ns string) {
	t.Helper()
	ns = env.Namespace(t, nil)
	dir = t.TempDir()
	writeFiles(t, dir, map[string]string{"sync.yaml": fmt.Sprintf(syncYAML, ns)})
	writeFiles(t, filepath.Join(dir, "repo"), files)
	return dir, ns
}

// syncDir creates the ManifestSync of dir in the cluster, with the
// repository as it is now, and waits until the operator has synced it.
func syncDir(t *testing.T, env *testenv.Env, dir string) {
	t.Helper()
	snap, err := source.Dir(filepath.Join(dir, "repo"), source.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	sf, err := readSyncFile(context.Background(), 0, filepath.Join(dir, "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ms := sf.Sync
	repos.mu.Lock()
	repos.snaps[ms.Spec.Sources[0].Git.URL] = snap
	repos.mu.Unlock()
	ctx := context.Background()
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ms) })
	waitSynced(t, env, ms)
}

// waitSynced waits until the operator has synced ms's generation, and
// returns it as it is then.
func waitSynced(t *testing.T, env *testenv.Env, ms *v1alpha1.ManifestSync) *v1alpha1.ManifestSync {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			t.Fatal(err)
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		if c != nil && c.ObservedGeneration == cur.Generation && c.Reason == v1alpha1.ReasonSynced {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ManifestSync did not sync: %+v", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// diff runs engine diff on dir's sync.yaml with the envtest context.
func diff(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	args = append([]string{"diff", "-f", filepath.Join(dir, "sync.yaml"), "--kubeconfig", cluster.kubeconfig, "--context", "envtest"}, args...)
	var out, errb bytes.Buffer
	start := time.Now()
	code = run(args, &out, &errb)
	t.Logf("engine diff: exit %d in %v\n%s%s", code, time.Since(start).Round(time.Millisecond), out.String(), errb.String())
	return code, out.String(), errb.String()
}

func wantContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q", w)
		}
	}
}

const (
	webConfigMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {color: blue, size: large}\n"
	oldConfigMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: old}\ndata: {a: b}\n"
	newConfigMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: new}\ndata: {c: d}\n"
)

func secretYAML(user, password string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ntype: Opaque\ndata: {user: %s, password: %s}\n",
		base64.StdEncoding.EncodeToString([]byte(user)), base64.StdEncoding.EncodeToString([]byte(password)))
}

// What the operator applied shows no difference; the kubeconfig comes
// from $KUBECONFIG as well as from --kubeconfig.
func TestDiffInSync(t *testing.T) {
	env := needCluster(t)
	dir, _ := newSyncDir(t, env, map[string]string{
		"web.yaml":    webConfigMap,
		"secret.yaml": secretYAML("admin", "s3cret-Pa55"),
	})
	syncDir(t, env, dir)
	code, stdout, stderr := diff(t, dir)
	if code != 0 || stdout != "" || stderr != "" {
		t.Errorf("in sync: exit %d, stdout %q, stderr %q; want 0 and nothing", code, stdout, stderr)
	}

	t.Setenv("KUBECONFIG", cluster.kubeconfig)
	var out, errb bytes.Buffer
	if code := run([]string{"diff", "-f", filepath.Join(dir, "sync.yaml"), "--context", "envtest"}, &out, &errb); code != 0 || out.Len()+errb.Len() != 0 {
		t.Errorf("with $KUBECONFIG: exit %d, %s%s", code, out.String(), errb.String())
	}
}

// A changed source shows as a unified diff naming the field.
func TestDiffChangedSource(t *testing.T) {
	env := needCluster(t)
	dir, ns := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap})
	syncDir(t, env, dir)
	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{"web.yaml": strings.Replace(webConfigMap, "blue", "green", 1)})
	code, stdout, _ := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout,
		"# dev: ConfigMap "+ns+"/web: would be configured\n",
		"--- live/dev/ConfigMap "+ns+"/web\n+++ desired/dev/ConfigMap "+ns+"/web\n@@ ",
		"\n-  color: blue\n+  color: green\n   size: large\n")
}

// A Secret's changed key shows as changed, its unchanged key as
// unchanged, and neither value, plain or base64, is printed.
func TestDiffSecretMasked(t *testing.T) {
	env := needCluster(t)
	dir, ns := newSyncDir(t, env, map[string]string{"secret.yaml": secretYAML("admin", "old-Pa55word")})
	syncDir(t, env, dir)
	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{"secret.yaml": secretYAML("admin", "new-Pa55word")})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout,
		"--- live/dev/Secret "+ns+"/creds\n",
		"-  password: '*** (before)'\n+  password: '*** (after)'\n",
		"   user: '***'\n")
	for _, secret := range []string{"admin", "old-Pa55word", "new-Pa55word"} {
		for _, s := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
			if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
				t.Errorf("the output shows %q", s)
			}
		}
	}
}

// Objects that a sync would create and prune are listed, whether the
// ManifestSync is in the cluster (its inventory) or not (the owner label).
func TestDiffCreatedAndPruned(t *testing.T) {
	env := needCluster(t)
	dir, ns := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap, "old.yaml": oldConfigMap})
	syncDir(t, env, dir)
	if err := os.Remove(filepath.Join(dir, "repo", "old.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{"new.yaml": newConfigMap})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout,
		"# dev: ConfigMap "+ns+"/new: would be created\n--- live/dev/ConfigMap "+ns+"/new\n+++ desired/dev/ConfigMap "+ns+"/new\n@@ -0,0 +1,",
		"+    manifestsync.dev/owner: "+ns+".web\n",
		"# dev: ConfigMap "+ns+"/old: would be pruned\n--- live/dev/ConfigMap "+ns+"/old\n+++ desired/dev/ConfigMap "+ns+"/old\n@@ -1,",
		"-  a: b\n")
	wantContains(t, stderr, "1 to create, 0 to configure, 1 to prune, 0 conflicts, 0 failing, 1 unchanged\n")

	// Without the ManifestSync in the cluster, the objects carrying its
	// owner label are the ones to prune.
	other, ns2 := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap})
	stray := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "stray", Labels: map[string]string{controller.OwnerLabel: ns2 + ".web"}}}
	if err := env.Client.Create(context.Background(), stray); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = diff(t, other)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout, "# dev: ConfigMap "+ns2+"/web: would be created\n", "# dev: ConfigMap "+ns2+"/stray: would be pruned\n")
}

// Pre-existing objects of another field manager show as each policy
// treats them: a conflict (Sync), nothing (Keep), taken over (Adopt),
// replaced with the fields of others removed (Overwrite).
func TestDiffPolicies(t *testing.T) {
	env := needCluster(t)
	dir, ns := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap})
	syncDir(t, env, dir)
	for _, name := range []string{"taken", "kept", "adopted", "replaced"} {
		cm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"data":     map[string]any{"a": "1", "theirs": "x"},
		}}
		if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(cm), client.FieldOwner("someone-else")); err != nil {
			t.Fatal(err)
		}
	}
	object := func(name, policy string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, annotations: {manifestsync.dev/policy: %s}}\ndata: {a: \"1\"}\n", name, policy)
	}
	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{
		"taken.yaml":    object("taken", "Sync"),
		"kept.yaml":     object("kept", "Keep"),
		"adopted.yaml":  object("adopted", "Adopt"),
		"replaced.yaml": object("replaced", "Overwrite"),
	})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout,
		"# dev: ConfigMap "+ns+"/taken: conflict: ConfigMap "+ns+"/taken exists and is not managed by this ManifestSync\n",
		"# dev: ConfigMap "+ns+"/adopted: would be configured\n",
		"# dev: ConfigMap "+ns+"/replaced: would be configured\n")
	if strings.Contains(stdout, ns+"/kept") {
		t.Error("the object kept (policy Keep) shows")
	}
	adopted := section(stdout, ns+"/adopted")
	wantContains(t, adopted, "+    manifestsync.dev/owner: "+ns+".web\n", "   theirs: x\n")
	replaced := section(stdout, ns+"/replaced")
	wantContains(t, replaced, "+    manifestsync.dev/owner: "+ns+".web\n", "-  theirs: x\n")
	wantContains(t, stderr, "0 to create, 2 to configure, 0 to prune, 1 conflict, 0 failing")
}

// section is the part of a diff's output about one object.
func section(out, object string) string {
	i := strings.Index(out, "# dev: ConfigMap "+object+":")
	if i < 0 {
		return ""
	}
	rest := out[i+1:]
	if j := strings.Index(rest, "\n# "); j >= 0 {
		return rest[:j+1]
	}
	return rest
}

// An API server that cannot be reached, or no usable kubeconfig, is an
// error (exit 2), as are bad flags.
func TestDiffErrors(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"sync.yaml":     fmt.Sprintf(syncYAML, "web"),
		"repo/web.yaml": webConfigMap,
	})
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, &rest.Config{Host: "https://127.0.0.1:1"}, "https://127.0.0.1:"+closedPort()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable", []string{"--kubeconfig", kubeconfig}, "connection refused"},
		{"no such context", []string{"--kubeconfig", kubeconfig, "--context", "nope"}, `context "nope"`},
		{"no kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "missing")}, "missing"},
		{"no -f", []string{"-f", ""}, "-f sync.yaml is required"},
		{"bad flag", []string{"--nope"}, "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"diff", "-f", filepath.Join(dir, "sync.yaml"), "--request-timeout", "5s"}, tc.args...)
			if code := run(args, &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tc.want)
			}
		})
	}
}

// Objects in a namespace that the sync creates first cannot be dry-run;
// they are listed as created, as they would be sent.
func TestDiffNewNamespace(t *testing.T) {
	env := needCluster(t)
	dir, _ := newSyncDir(t, env, nil)
	ns := "t-new-" + rand.String(6)
	writeFiles(t, dir, map[string]string{
		"sync.yaml":     fmt.Sprintf(syncYAML, ns),
		"repo/ns.yaml":  "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n",
		"repo/web.yaml": webConfigMap,
	})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout, "# dev: Namespace "+ns+": would be created\n", "# dev: ConfigMap "+ns+"/web: would be created\n", "+  color: blue\n")
	wantContains(t, stderr, "2 to create, 0 to configure")
}

// A Secret's value copied into another object, or quoted by the API
// server refusing it, is masked too.
func TestDiffSecretValueElsewhere(t *testing.T) {
	env := needCluster(t)
	const value = "Diff Secret Value!"
	dir, _ := newSyncDir(t, env, map[string]string{
		"secret.yaml": secretYAML("admin", value),
		"web.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {dsn: 'postgres://admin:" + value + "@db'}\n",
		"bad.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, labels: {pw: '" + value + "'}}\n",
	})
	code, stdout, stderr := diff(t, dir)
	if code != 2 {
		t.Errorf("exit %d, want 2 (an object would fail)", code)
	}
	wantContains(t, stdout, "would fail: ", `Invalid value: "***"`, "dsn: postgres://***:***@db")
	for _, s := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("the output shows %q", s)
		}
	}
}

// A transform may name an object after a Secret's value: the diff's
// headers mask the name as its body masks the value.
func TestDiffSecretValueInName(t *testing.T) {
	env := needCluster(t)
	const value = "leaked-secret-name"
	dir, ns := newSyncDir(t, env, map[string]string{
		"secret.yaml": secretYAML("admin", value),
		"named.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + value + "}\ndata: {a: b}\n",
	})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1 (changes)\n%s", code, stderr)
	}
	wantContains(t, stdout, "# dev: ConfigMap "+ns+"/***: would be created")
	for _, s := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if strings.Contains(stdout, s) || strings.Contains(stderr, s) {
			t.Errorf("the output shows %q:\n%s", s, stdout)
		}
	}
}
