// Package testenv runs a real kube-apiserver and etcd (controller-runtime's
// envtest) for the operator's tests, with the ManifestSync CRD installed.
//
// One environment serves a whole test package: start it in TestMain with
// Run, and make a namespace per test with Env.Namespace so that tests stay
// independent. The assets come from $KUBEBUILDER_ASSETS or <repo>/bin/envtest
// (`make envtest`); when they are missing the tests fail, except under
// -short, where every test that needs the environment is skipped.
//
// Workloads do not roll out in that environment: it runs no controllers,
// no scheduler and no nodes. A package whose tests need Deployments,
// StatefulSets, DaemonSets and Jobs to become available or complete opts in
// with the WithWorkloads setup,
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &env, testenv.WithWorkloads())) }
//
// which also runs kube-scheduler, kube-controller-manager and kwok (fake
// Nodes, Env.Nodes, whose pods kwok makes Running and Ready), all built into
// bin/envtest by hack/envtest.sh, bound to 127.0.0.1, logging to files
// whose last lines are printed when the package fails, and stopped after
// it. With it, the namespace controller runs too: a deleted namespace's
// objects go away, as in a cluster. StartWorkloads starts the same beside
// any API server (the demo and the benchmarks use it).
//
// It is for tests, the demo and the benchmarks: the engine and the operator
// never import it (the cmd/engine tests of engine diff use it too, hence
// not internal).
package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Env is a running API server with a client for it.
type Env struct {
	// Config connects to the API server as an administrator.
	Config *rest.Config
	// Scheme knows the built-in kinds and ManifestSync.
	Scheme *runtime.Scheme
	// Client is an uncached client of Config.
	Client client.Client

	// Nodes are the fake Nodes of WithWorkloads (nil without it).
	Nodes []string

	env       *envtest.Environment
	certDir   string     // the API server's, kept across restarts
	workloads *Workloads // WithWorkloads' programs, or nil
	failed    bool       // the tests failed: teardowns keep their logs
	apiErr    *tail      // the end of the API server's stderr
}

// Setup runs once the environment is up, before the tests, and returns
// what to do after them (such as stopping a controller manager).
type Setup func(*Env) (teardown func(), err error)

// Run starts the environment, stores it in *env, runs the setups and the
// tests, then tears down and stops; its result is TestMain's exit code.
// Under -short it starts nothing and leaves *env nil, so that Env.Need
// skips.
func Run(m *testing.M, env **Env, setups ...Setup) int {
	flag.Parse()
	// controller-runtime's own logs (envtest's, the informers', an
	// operator's) are not what the tests read; unset, the first of them
	// prints a stack into the test's output, which reads like a panic.
	ctrllog.SetLogger(logr.Discard())
	if testing.Short() {
		return m.Run()
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	*env = e
	code := runWith(m, e, setups)
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func runWith(m *testing.M, e *Env, setups []Setup) int {
	for _, setup := range setups {
		teardown, err := setup(e)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setup: %v\n", err)
			return 1
		}
		if teardown != nil {
			defer teardown()
		}
	}
	code := m.Run()
	if code != 0 {
		e.failed = true
		if e.workloads != nil {
			e.workloads.PrintLogs(os.Stderr)
		}
	}
	return code
}

// Second is a Setup that starts another environment into *e: a remote
// cluster for the tests that need one. It is stopped after the tests.
func Second(e **Env) Setup {
	return func(*Env) (func(), error) {
		second, err := Start()
		if err != nil {
			return nil, fmt.Errorf("starting the remote cluster: %w", err)
		}
		*e = second
		return func() { _ = second.Stop() }, nil
	}
}

// Need skips the test when no environment runs (under -short).
func (e *Env) Need(t testing.TB) {
	t.Helper()
	if e == nil {
		t.Skip("needs a kube-apiserver; skipped under -short")
	}
}

// Option changes the control plane Start starts.
type Option func(*envtest.Environment) error

// WithAuditLog makes the API server log every write request (create,
// update, patch, delete) with its user and time to path, one JSON event a
// line (see ReadAudit): tests tell who wrote what, and when.
func WithAuditLog(path string) Option {
	return WithAuditPolicy(path, `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`)
}

// WithAuditPolicy makes the API server log to path, one JSON event a line
// as each request is answered, what the audit policy rules (an
// audit.k8s.io/v1 Policy) say.
func WithAuditPolicy(path, rules string) Option {
	return func(te *envtest.Environment) error {
		policy := filepath.Join(filepath.Dir(path), "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(rules), 0o600); err != nil {
			return err
		}
		args := te.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", path)
		args.Set("audit-log-format", "json")
		// Events are written as they come, not in batches.
		args.Set("audit-log-mode", "blocking")
		return nil
	}
}

// Start starts etcd and kube-apiserver and installs the CRDs of
// operator/config/crd/bases.
func Start(opts ...Option) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir(root, "etcd", "kube-apiserver")
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The API server's certificates live in a directory of ours, so that
	// StopAPIServer and StartAPIServer keep them: clients (and kubeconfigs
	// made by Kubeconfig) stay valid across a restart.
	certDir, err := os.MkdirTemp("", "testenv-apiserver-")
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	te.ControlPlane.GetAPIServer().CertDir = certDir
	apiErr := &tail{max: 16 << 10}
	te.ControlPlane.GetAPIServer().Err = apiErr
	ConfigureAPIServer(te)
	for _, opt := range opts {
		if err := opt(te); err != nil {
			_ = os.RemoveAll(certDir)
			return nil, err
		}
	}
	cfg, err := te.Start()
	if err != nil {
		_ = os.RemoveAll(certDir)
		return nil, fmt.Errorf("starting envtest with the assets in %s: %w", assets, err)
	}
	// Tests make many requests quickly; client-side throttling would
	// only slow them down.
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = te.Stop()
		_ = os.RemoveAll(certDir)
		return nil, err
	}
	return &Env{Config: cfg, Scheme: scheme, Client: c, env: te, certDir: certDir, apiErr: apiErr}, nil
}

// ConfigureAPIServer sets what the API servers of the tests, the demo and
// the benchmarks need beyond envtest's defaults: the WatchList feature off.
// It needs progress notifications from etcd, which Debian's etcd (3.4)
// does not send; with it on, the server turns every watch from
// resourceVersion "" or "0" into a watch-list stream and ends it at once
// with an error ("the required storage feature RequestWatchProgress is
// disabled"), so that such a watcher (kwok's, for one) sees changes only
// at its next relist. With it off, such a watch is a plain watch, as on a
// server without the feature.
func ConfigureAPIServer(te *envtest.Environment) {
	te.ControlPlane.GetAPIServer().Configure().Append("feature-gates", "WatchList=false")
}

// Stop stops the API server and etcd. The API server is killed, not
// stopped gracefully: the tests are over, and a graceful stop with watches
// still open can outlast envtest's stop timeout, which fails the package.
func (e *Env) Stop() error {
	_ = e.KillAPIServer() // fails when it is down already; Stop then finds it so
	err := e.env.Stop()
	return errors.Join(err, os.RemoveAll(e.certDir))
}

// StopAPIServer stops only the kube-apiserver, leaving etcd running, so
// that the cluster looks unreachable until StartAPIServer.
func (e *Env) StopAPIServer() error {
	return e.env.ControlPlane.APIServer.Stop()
}

// KillAPIServer kills the kube-apiserver with SIGKILL, as a crash or the
// loss of its machine would, leaving etcd running: unlike StopAPIServer it
// does not wait for a graceful shutdown (which, with many watches open,
// can outlast the stop timeout). StartAPIServer starts it again.
func (e *Env) KillAPIServer() error {
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		return err
	}
	pid, err := findProcess("kube-apiserver", "--secure-port="+u.Port())
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver %d: %w", pid, err)
	}
	// envtest reaps it; once it has, Stop finds it exited and cleans up
	// (before, it fails to signal it).
	var stopErr error
	for range 500 {
		if stopErr = e.env.ControlPlane.APIServer.Stop(); stopErr == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("kube-apiserver %d killed, but: %w", pid, stopErr)
}

// findProcess returns the pid of the process whose program is named name
// and whose arguments include arg.
func findProcess(name, arg string) (int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) == name && slices.Contains(args[1:], arg) {
			return strconv.Atoi(filepath.Base(dir))
		}
	}
	return 0, fmt.Errorf("no %s process with %s", name, arg)
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped (or
// KillAPIServer killed), on the same address, certificates and etcd: the
// cluster is back as it was.
//
// A kube-apiserver that exits as it starts (it gives up on a slow etcd
// on a loaded machine, for one) is started again, three times in all;
// the error then says what it printed last.
func (e *Env) StartAPIServer() error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		e.apiErr.reset()
		if err = e.env.ControlPlane.APIServer.Start(); err == nil {
			return nil
		}
		_ = e.env.ControlPlane.APIServer.Stop() // it may still run, if it timed out
	}
	return fmt.Errorf("%w; it printed last:\n%s", err, e.apiErr.lastLines(8))
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tail) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = t.b[:0]
}

// lastLines is the last n whole lines written.
func (t *tail) lastLines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(t.b), "\n"), "\n")
	if len(lines) > 0 && len(t.b) == t.max {
		lines = lines[1:] // cut by the limit
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// FreeAddr is an address of 127.0.0.1 with a port free a moment ago, for
// a server that takes an address rather than a listener.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Kubeconfig returns a kubeconfig of a new user in the group
// system:masters, for a client that reaches this API server as a remote
// cluster.
func (e *Env) Kubeconfig(user string) ([]byte, error) {
	u, err := e.env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	return u.KubeConfig()
}

// ClientAs is a client of the API server as user, by impersonation: its
// RBAC (and admission) decide what the user may do.
func (e *Env) ClientAs(t testing.TB, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace with a random name for one test. It is
// deleted when the test ends; envtest runs no namespace controller (unless
// WithWorkloads), so the objects in it stay (tests must not rely on them
// going away).
func (e *Env) Namespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(8), Labels: labels}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() { _ = e.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// assetsDir is $KUBEBUILDER_ASSETS, or bin/envtest in the repository; it
// must hold the files named.
func assetsDir(root string, names ...string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(root, "bin", "envtest")
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("no %s in %s: run make envtest (or set KUBEBUILDER_ASSETS)", name, dir)
		}
	}
	return dir, nil
}

// RepoRoot is the nearest directory at or above the working directory that
// holds go.mod: the checkout whose assets (bin/envtest) and files the tests,
// the benchmarks and the demo use.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
