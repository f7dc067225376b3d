// Command demo runs ManifestSync end to end on this machine: it starts a
// local control plane (etcd, kube-apiserver, and, so that workloads roll
// out, kube-scheduler, kube-controller-manager and kwok's fake nodes: the
// assets `make envtest` provides in bin/envtest), installs the CRD, runs
// `engine operator` against it, serves the examples' Git sources from a git
// daemon on 127.0.0.1, applies the examples, and shows each ManifestSync's
// status, the objects it produced and its Deployments rolling out, and
// serves the web UI (package ui, as engine ui does, as the cluster's
// administrator) on 127.0.0.1:8090, or a free port when that one is taken,
// printing its address. It
// writes each example as it applied it (renamed, its target namespaces
// prefixed, its Git sources on the daemon) to bin/demo/examples/NAME, with
// the local copies of its object sources, for `engine diff -f`. It runs
// until interrupted; with DEMO_EXIT=1 it exits 0 once every ManifestSync is
// Ready and every Deployment Available, and 1 if one is not within two
// minutes. Ctrl-C is its normal end: it stops the operator, the git daemon
// and the control plane and exits 0 (a second Ctrl-C quits at once).
// `make demo` runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/view"
	"github.com/manifestsync/manifestsync/stdlib"
)

// readyTimeout bounds the wait for Ready under DEMO_EXIT=1.
const readyTimeout = 2 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the demo at once
		say("interrupted: stopping the operator, the git daemon and the control plane (Ctrl-C again quits at once)")
	}()
	err := run(ctx, options{exitWhenReady: os.Getenv("DEMO_EXIT") == "1"})
	os.Exit(exitCode(os.Stderr, err, ctx.Err() != nil))
}

// exitCode is the demo's exit status, once run returned err: 0 when it
// ended well or was interrupted (Ctrl-C is how a demo ends, whatever step
// it stopped: `make demo` must not end in an error then), else 1, with
// the error written to w.
func exitCode(w io.Writer, err error, interrupted bool) int {
	switch {
	case interrupted:
		say("stopped")
		return 0
	case err != nil:
		fmt.Fprintln(w, "demo:", err)
		return 1
	}
	return 0
}

// options are how a demo runs.
type options struct {
	// exitWhenReady ends the demo once every ManifestSync is Ready and
	// every Deployment Available (DEMO_EXIT=1), with an error when one is
	// not within readyTimeout; without it the demo runs until interrupted.
	exitWhenReady bool
	// whenReady, when set, runs then, against the running cluster, before
	// the demo stops it; its error is the demo's.
	whenReady func(ctx context.Context, d *demo) error
	// uiAddr is where the web UI listens; "" is uiAddr's default, with a
	// free port when that one is taken.
	uiAddr string
}

// uiAddr is where the demo serves the web UI unless the port is taken:
// engine ui's default.
const uiAddr = "127.0.0.1:8090"

// demo is what a running demo shows its whenReady: where its cluster is.
type demo struct {
	// root is the repository's root directory.
	root string
	// engine is the engine program the demo built (bin/engine).
	engine string
	// kubeconfig is the file of the demo's cluster (bin/demo/kubeconfig).
	kubeconfig string
	// client is an administrator's client of that cluster.
	client client.Client
	// examples are the examples applied, in the order of their names.
	examples []example
	// ui is the web UI's address, http://127.0.0.1:PORT/.
	ui string
}

// quietLogs sends controller-runtime's log (the client's and envtest's)
// to w, errors only. Without a logger, the first thing that logs after 30
// seconds (a cold demo's createObjectSet) prints a stack trace saying
// log.SetLogger was never called; with one at the info level, every
// deprecation warning of the API server would show between the tables.
// An error is one line, without a stack trace.
func quietLogs(w io.Writer) logr.Logger {
	return ctrlzap.New(ctrlzap.WriteTo(w), ctrlzap.Level(zapcore.ErrorLevel),
		ctrlzap.ConsoleEncoder(), ctrlzap.StacktraceLevel(zapcore.PanicLevel))
}

func run(ctx context.Context, opts options) error {
	ctrllog.SetLogger(quietLogs(os.Stderr))
	exitWhenReady := opts.exitWhenReady
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	work := filepath.Join(root, "bin", "demo")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}

	say("starting a local control plane (etcd, kube-apiserver)")
	cp, kubeconfig, err := startControlPlane(root, work)
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	c, err := newClient(cp)
	if err != nil {
		return err
	}
	say("starting kube-scheduler, kube-controller-manager and kwok's fake nodes (logs: bin/demo/workloads)")
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		return err
	}
	workloads, err := testenv.StartWorkloads(kc, c, filepath.Join(work, "workloads"))
	if err != nil {
		return err
	}
	defer workloads.Stop()

	say("serving the examples' Git sources on a git daemon on 127.0.0.1")
	gitURL, stopDaemon, err := startGitDaemon(ctx, filepath.Join(work, "git"))
	if err != nil {
		return err
	}
	defer stopDaemon()

	say("building bin/engine (cold: a few minutes) and running engine operator (logs: bin/demo/operator.log)")
	engineBin, stopOperator, err := startOperator(ctx, root, work, kubeconfig)
	if err != nil {
		return err
	}
	defer stopOperator()

	uiURL, stopUI, err := startUI(ctx, engineBin, work, kubeconfig, opts.uiAddr)
	if err != nil {
		return err
	}
	defer stopUI()
	say("UI: " + uiURL + " (every ManifestSync, live; as the cluster's administrator)")

	syncs, err := applyExamples(ctx, c, root, work, gitURL)
	if err != nil {
		return err
	}
	say(fmt.Sprintf("applied %s; waiting for them to be Ready", plural.Count(len(syncs), "example")))
	deadline := time.Now().Add(readyTimeout)
	ready := waitReady(ctx, c, syncs, exitWhenReady, deadline)
	if ctx.Err() != nil {
		return nil // interrupted: main says so
	}
	if err := showObjects(ctx, c); err != nil {
		return err
	}
	if exitWhenReady && !ready {
		return fmt.Errorf("not every ManifestSync was Ready within %s (see bin/demo/operator.log)", readyTimeout)
	}
	say("the Deployments roll out on kwok's fake nodes " + strings.Join(workloads.Nodes, ", "))
	available := waitAvailable(ctx, c, exitWhenReady, deadline)
	if ctx.Err() != nil {
		return nil
	}
	if exitWhenReady {
		if !available {
			return fmt.Errorf("not every Deployment was Available within %s (see bin/demo/workloads)", readyTimeout)
		}
		say("every ManifestSync is Ready and every Deployment Available")
		if opts.whenReady != nil {
			return opts.whenReady(ctx, &demo{root: root, engine: engineBin, kubeconfig: kubeconfig, client: c, examples: syncs, ui: uiURL})
		}
		return nil
	}
	fmt.Print(closingHint(engineBin, kubeconfig, uiURL))
	say("press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}

func say(msg string) { fmt.Printf("==> %s\n", msg) }

// closingHint says how to look at the demo's cluster while it runs: in
// the web UI at uiURL; with the engine program it built (the project
// provides no kubectl) and its kubeconfig, as paths a user in the
// repository's root types; and how to diff an example, as the demo
// applied it (under examples, beside the kubeconfig), with what the
// cluster holds.
func closingHint(engine, kubeconfig, uiURL string) string {
	e, kc := shown(engine), shown(kubeconfig)
	applied := filepath.Join(filepath.Dir(kc), "examples")
	return "==> the control plane keeps running; see every ManifestSync, and one's objects, in the web UI:\n" +
		fmt.Sprintf("    UI: %s\n", uiURL) +
		"==> or with:\n" +
		fmt.Sprintf("    %s status --kubeconfig %s\n", e, kc) +
		fmt.Sprintf("    %s status mirror -n platform --kubeconfig %s\n", e, kc) +
		fmt.Sprintf("==> %s/NAME/sync.yaml is each example as the demo applied it; what syncing it would change (nothing: exit 0):\n", applied) +
		fmt.Sprintf("    %s diff -f %s --kubeconfig %s\n", e, filepath.Join(applied, "replicate-secret", "sync.yaml"), kc)
}

// shown is path as a user types it: relative when it is under the
// working directory (make demo runs in the repository's root), else
// absolute.
func shown(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}

// startUI runs `engine ui` (bin, the binary the operator runs) against
// the demo's cluster as its administrator, on addr (uiAddr when empty), or
// on a free port of 127.0.0.1 when that one is taken; it returns the URL
// engine ui prints and how to stop it. Its log is bin/demo/ui.log.
func startUI(ctx context.Context, bin, work, kubeconfig, addr string) (string, func(), error) {
	if addr == "" {
		addr = uiAddr
	}
	if ln, err := net.Listen("tcp", addr); err != nil {
		addr = "127.0.0.1:0"
	} else {
		ln.Close()
	}
	logFile, err := os.Create(filepath.Join(work, "ui.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "ui", "--kubeconfig", kubeconfig, "--addr", addr)
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(work, "cache"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", nil, fmt.Errorf("starting engine ui: %w", err)
	}
	stop := func() { stopProcess(cmd, logFile) }
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if url, ok := strings.CutPrefix(line, "ui: serving on "); ok {
				select {
				case found <- url:
				default:
				}
			}
			fmt.Fprintln(logFile, line)
		}
		close(found)
	}()
	select {
	case url, ok := <-found:
		if !ok {
			stop()
			return "", nil, errors.New("engine ui stopped before it served (see bin/demo/ui.log)")
		}
		return url, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("engine ui did not serve within 30s (see bin/demo/ui.log)")
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}

// stopProcess ends a process of the demo as Ctrl-C would (SIGTERM, then
// SIGKILL after 10 s) and closes its log.
func stopProcess(cmd *exec.Cmd, logFile *os.File) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	logFile.Close()
}

// startControlPlane starts envtest with the CRD and writes an admin
// kubeconfig for the operator and for the user.
func startControlPlane(root, work string) (*envtest.Environment, string, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "envtest")
	}
	cp := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "operator", "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
	}
	testenv.ConfigureAPIServer(cp)
	if _, err := cp.Start(); err != nil {
		_ = cp.Stop() // what started before the failure (etcd) goes too
		return nil, "", fmt.Errorf("starting the control plane with the assets in %s (make envtest): %w", assets, err)
	}
	user, err := cp.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = cp.Stop()
		return nil, "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = cp.Stop()
		return nil, "", err
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		_ = cp.Stop()
		return nil, "", err
	}
	return cp, kubeconfig, nil
}

func newClient(cp *envtest.Environment) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(cp.Config, client.Options{Scheme: scheme})
}

// startGitDaemon serves the bare repositories under dir over git:// and
// returns its URL.
func startGitDaemon(ctx context.Context, dir string) (string, func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.CommandContext(ctx, "git", "daemon", "--reuseaddr", "--export-all",
		"--base-path="+dir, "--listen=127.0.0.1", "--port="+strconv.Itoa(port))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	// `git daemon` runs git-daemon as a child of its own: the two are
	// stopped as a process group, or the server outlives the demo.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("git daemon: %w", err)
	}
	stop := func() { _ = cmd.Cancel(); _ = cmd.Wait() }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "git://" + addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("git daemon does not listen on %s", addr)
		}
	}
}

// startOperator builds bin/engine and runs `engine operator` against the
// control plane; it returns the program's path and how to stop it.
func startOperator(ctx context.Context, root, work, kubeconfig string) (string, func(), error) {
	bin := filepath.Join(root, "bin", "engine")
	build := enginebuild.Command(ctx, root, bin) // the full engine, make build's: the demo's CLI commands use it too
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return "", nil, fmt.Errorf("building engine: %w", err)
	}
	logFile, err := os.Create(filepath.Join(work, "operator.log"))
	if err != nil {
		return "", nil, err
	}
	// The examples' ManifestSyncs are the platform team's, in namespace
	// platform: trusted, they write into the namespaces they target, as
	// a platform team's do (the operator's own namespace would be
	// trusted by default, but it runs outside a pod here).
	cmd := exec.Command(bin, "operator", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--trusted-namespaces", "platform")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(work, "cache"))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", nil, fmt.Errorf("starting engine operator: %w", err)
	}
	return bin, func() { stopProcess(cmd, logFile) }, nil
}

// example is one example the demo applied.
type example struct {
	ms *v1alpha1.ManifestSync
	// labelled are the namespaces the demo made for the example's
	// namespaceSelector targets: one target row each, to be Synced too.
	labelled []string
}

// applyExamples creates, for every example that is meant to sync (those
// with an expected.yaml), its namespaces and object sources, publishes its
// Git sources on the daemon, points the spec at them, and creates the
// ManifestSync.
func applyExamples(ctx context.Context, c client.Client, root, work, gitURL string) ([]example, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "examples", "*", "expected.yaml"))
	if err != nil {
		return nil, err
	}
	var out []example
	for _, expected := range dirs {
		dir := filepath.Dir(expected)
		applied := filepath.Join(work, "examples", filepath.Base(dir))
		ex, err := prepareExample(ctx, c, dir, applied, filepath.Join(work, "git"), gitURL, filepath.Join(work, "kubeconfig"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		ms := ex.ms
		if err := writeSyncFile(filepath.Join(applied, "sync.yaml"), dir, ms); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		if err := c.Create(ctx, ms); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		fmt.Printf("    %-20s ManifestSync %s/%s, %s\n", filepath.Base(dir), ms.Namespace, ms.Name, plural.Count(len(ms.Spec.Targets), "target"))
		if len(ex.labelled) > 0 {
			fmt.Printf("    %-20s labelled namespaces for its namespaceSelector: %s\n", "", strings.Join(ex.labelled, ", "))
		}
		out = append(out, ex)
	}
	return out, nil
}

// prepareExample reads the example in dir and makes the cluster ready
// for it: its namespaces (prefixed with its name), its object sources,
// its Git sources on the daemon and its remote clusters' kubeconfig
// Secrets. It writes into applied the local copies of its object and
// object set sources, as it created them, for engine diff; its Git
// sources need none: engine diff fetches them from the daemon.
func prepareExample(ctx context.Context, c client.Client, dir, applied, repos, gitURL, kubeconfig string) (example, error) {
	if err := os.MkdirAll(applied, 0o755); err != nil {
		return example{}, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "sync.yaml"))
	if err != nil {
		return example{}, err
	}
	sf, err := engine.LoadSyncFile(filepath.Join(dir, "sync.yaml"), b)
	if err != nil {
		return example{}, err
	}
	ms := sf.Sync
	ex := example{ms: ms}
	// Several examples render the same app into the same namespaces; in
	// one cluster they would conflict (which the operator reports), so
	// each example gets namespaces of its own.
	name := filepath.Base(dir)
	ms.Name = name
	if err := ensureNamespace(ctx, c, ms.Namespace); err != nil {
		return example{}, err
	}
	for i := range ms.Spec.Targets {
		t := &ms.Spec.Targets[i]
		if t.NamespaceSelector != nil && t.Cluster == nil {
			made, err := labelNamespaces(ctx, c, dir, t)
			if err != nil {
				return example{}, err
			}
			ex.labelled = append(ex.labelled, made...)
		}
		if t.Namespace == "" {
			continue
		}
		t.Namespace = name + "-" + t.Namespace
		if t.Cluster != nil {
			// The local control plane stands in for the remote cluster
			// too: the target gets namespaces of its own, and its
			// kubeconfig Secret points at the same API server.
			ref := t.Cluster.KubeConfigSecretRef
			t.Namespace = name + "-" + ref.Name + "-" + strings.TrimPrefix(t.Namespace, name+"-")
			if err := createKubeconfigSecret(ctx, c, ms.Namespace, ref, kubeconfig); err != nil {
				return example{}, fmt.Errorf("target %q: %w", t.Name, err)
			}
		}
		if err := ensureNamespace(ctx, c, t.Namespace); err != nil {
			return example{}, err
		}
	}
	for i := range ms.Spec.Sources {
		src := &ms.Spec.Sources[i]
		switch {
		case src.Object != nil:
			err = createObjectSource(ctx, c, ms.Namespace, filepath.Join(dir, src.Name+".yaml"), filepath.Join(applied, src.Name+".yaml"))
		case src.Objects != nil:
			err = createObjectSet(ctx, c, ms.Namespace, filepath.Join(dir, src.Name+".yaml"), filepath.Join(applied, src.Name+".yaml"))
		case src.Git != nil:
			err = publishGitSource(dir, repos, gitURL, src)
		}
		for _, ref := range source.RefsOf(src) {
			if err != nil {
				break
			}
			// The ConfigMaps and Secrets its substituteFrom and
			// valuesFrom name, kept beside sync.yaml for engine eval.
			err = createObjectSource(ctx, c, ms.Namespace, filepath.Join(dir, ref.Name+".yaml"), filepath.Join(applied, ref.Name+".yaml"))
		}
		if err == nil && src.Cluster != nil {
			// The local control plane stands in for the cluster the
			// source reads, as for remote targets.
			err = createKubeconfigSecret(ctx, c, ms.Namespace, src.Cluster.KubeConfigSecretRef, kubeconfig)
		}
		if err != nil {
			return example{}, fmt.Errorf("source %q: %w", src.Name, err)
		}
	}
	if d := ms.Spec.Decryption; d != nil {
		// The example's age key, demo.agekey beside sync.yaml, in the
		// Secret spec.decryption names, as its *.agekey entry.
		if err := createAgeKeySecret(ctx, c, ms.Namespace, d.SecretRef.Name, filepath.Join(dir, "demo.agekey")); err != nil {
			return example{}, fmt.Errorf("spec.decryption: %w", err)
		}
	}
	return ex, nil
}

// createAgeKeySecret creates the Secret name in namespace holding the age
// identity file as its identity.agekey entry.
func createAgeKeySecret(ctx context.Context, c client.Client, namespace, name, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{"identity.agekey": b}}
	if err := c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("Secret %s/%s: %w", namespace, name, err)
	}
	return nil
}

// labelNamespaces makes the namespaces the namespaceSelector target t of
// the example in dir picks, so that the demo shows its copies (without
// them it synced to no namespace at all): those of the example's
// namespaces.yaml (the cluster's namespaces for engine eval, see its
// eval.args) that the selector matches, named with the example's prefix
// and labelled as there; without that file, or when none matches, one
// namespace EXAMPLE-TARGET labelled with the selector's matchLabels. It
// returns their names.
func labelNamespaces(ctx context.Context, c client.Client, dir string, t *v1alpha1.Target) ([]string, error) {
	name := filepath.Base(dir)
	sel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("target %q: namespaceSelector: %w", t.Name, err)
	}
	file := filepath.Join(dir, "namespaces.yaml")
	objs, err := decodeObjects(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var want []*corev1.Namespace
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o}
		if u.GetKind() == "Namespace" && sel.Matches(labels.Set(u.GetLabels())) {
			want = append(want, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + u.GetName(), Labels: u.GetLabels()}})
		}
	}
	if len(want) == 0 {
		lbls := t.NamespaceSelector.MatchLabels
		if !sel.Matches(labels.Set(lbls)) {
			return nil, fmt.Errorf("target %q: no namespace of %s matches its namespaceSelector, nor do its matchLabels alone", t.Name, file)
		}
		want = append(want, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + t.Name, Labels: lbls}})
	}
	names := make([]string, len(want))
	for i, ns := range want {
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("target %q: namespace %s: %w", t.Name, ns.Name, err)
		}
		names[i] = ns.Name
	}
	return names, nil
}

// decodeObjects are the objects of a YAML file as kubectl get -o yaml
// prints them: documents, or the items of a List.
func decodeObjects(file string) ([]map[string]any, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	docs, err := stdlib.DecodeYAMLStream(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var objs []map[string]any
	for _, d := range docs {
		m, ok := d.Value.(map[string]any)
		if !ok {
			continue
		}
		items, isList := m["items"].([]any)
		if !isList || m["kind"] != "List" {
			objs = append(objs, m)
			continue
		}
		for _, it := range items {
			if o, ok := it.(map[string]any); ok {
				objs = append(objs, o)
			}
		}
	}
	return objs, nil
}

// createObjectSet creates the objects an example keeps beside its
// sync.yaml for an object set source (NAME.yaml, as kubectl get -o yaml
// prints them), when there is such a file; without one the set starts
// empty. The file is a copy of what a cluster held: what its API server
// set or allocated (status, uids, cluster IPs, node ports) goes as the dr
// module strips it, and Jobs, whose selectors hold the other cluster's
// uids, are left out. It writes the objects, as the cluster holds them,
// to copyTo: the set's local copy for engine diff (empty when the set is).
func createObjectSet(ctx context.Context, c client.Client, namespace, file, copyTo string) error {
	decoded, err := decodeObjects(file)
	if errors.Is(err, fs.ErrNotExist) {
		return writeObjects(copyTo, nil)
	}
	if err != nil {
		return err
	}
	objs := make([]any, len(decoded))
	for i, o := range decoded {
		objs[i] = o
	}
	clean, err := stdlib.DRCopy(objs, stdlib.DROptions{Active: true, StripNodePorts: true})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	created := make([]*unstructured.Unstructured, 0, len(clean))
	for _, o := range clean {
		obj := &unstructured.Unstructured{Object: o.(map[string]any)}
		if obj.GetNamespace() == "" {
			obj.SetNamespace(namespace)
		}
		if err := ensureNamespace(ctx, c, obj.GetNamespace()); err != nil {
			return err
		}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %s %s/%s: %w", file, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		created = append(created, obj)
	}
	return writeLive(ctx, c, copyTo, created)
}

// writeLive writes the objects as the cluster holds them, what its server
// set stripped, to file: the local copy of an object or object set source
// for engine diff. They are read back, not written as given: two examples
// may create the same object (mirror's and replicate-secret's
// platform/wildcard-tls), and the cluster keeps the first one's, which is
// what the operator reads for both.
func writeLive(ctx context.Context, c client.Client, file string, objs []*unstructured.Unstructured) error {
	live := make([]map[string]any, len(objs))
	for i, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			return fmt.Errorf("%s: reading back %s %s/%s: %w", file, o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		stripServerFields(got)
		live[i] = got.Object
	}
	return writeObjects(file, live)
}

// stripServerFields removes from obj what its API server set: a file
// holding it is a copy of what the cluster holds.
func stripServerFields(obj *unstructured.Unstructured) {
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetManagedFields(nil)
	obj.SetGeneration(0)
	unstructured.RemoveNestedField(obj.Object, "status")
}

// writeObjects writes objs to file as YAML documents.
func writeObjects(file string, objs []map[string]any) error {
	var b bytes.Buffer
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}

// writeSyncFile writes ms, as the demo applies it (renamed after the
// example in dir, its target namespaces prefixed, its Git sources on the
// daemon), to file: a sync file that engine diff compares with what the
// demo's cluster holds, beside the local copies of its object sources.
func writeSyncFile(file, dir string, ms *v1alpha1.ManifestSync) error {
	applied := &v1alpha1.ManifestSync{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ManifestSync"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ms.Name, Namespace: ms.Namespace, Labels: ms.Labels, Annotations: ms.Annotations,
		},
		Spec: ms.Spec,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(applied)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	delete(obj, "status")
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	y, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	header := fmt.Sprintf("# %s/sync.yaml as the demo applied it: named after its directory, its\n"+
		"# target namespaces prefixed with that name, its Git sources served by the\n"+
		"# demo's git daemon. Compare it with the cluster, while the demo runs:\n"+
		"#   bin/engine diff -f %s --kubeconfig bin/demo/kubeconfig\n", shown(dir), shown(file))
	return os.WriteFile(file, append([]byte(header), y...), 0o644)
}

// publishGitSource serves a git source from the example's local copy
// NAME/ (what engine eval reads), published as the root of a repository.
func publishGitSource(dir, repos, gitURL string, src *v1alpha1.Source) error {
	repo := filepath.Base(dir) + "-" + src.Name
	src.Git.Path = ""
	scratch, err := os.MkdirTemp("", "demo-publish")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	if _, err := gittest.PublishDir(repos, repo, filepath.Join(dir, src.Name), scratch); err != nil {
		return err
	}
	src.Git.URL = gitURL + "/" + repo + ".git"
	src.Git.Ref = v1alpha1.GitRef{Branch: "main"}
	src.Git.SecretRef = nil
	return nil
}

// createKubeconfigSecret creates the kubeconfig Secret of a remote target
// from the demo's own kubeconfig file.
func createKubeconfigSecret(ctx context.Context, c client.Client, namespace string, ref v1alpha1.SecretKeyReference, kubeconfig string) error {
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		return err
	}
	key := ref.Key
	if key == "" {
		key = "value"
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ref.Name}, Data: map[string][]byte{key: kc}}
	err = c.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	if name == "" {
		return nil
	}
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createObjectSource creates the object an example keeps beside its
// sync.yaml, in the ManifestSync's namespace unless it names its own, and
// writes it, as the cluster holds it, to copyTo: the source's local copy
// for engine diff.
func createObjectSource(ctx context.Context, c client.Client, namespace, file, copyTo string) error {
	snap, err := source.ObjectFile(file)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: snap.Object}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	// The file is a copy of what a cluster held: drop what the server sets.
	stripServerFields(obj)
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return writeLive(ctx, c, copyTo, []*unstructured.Unstructured{obj})
}

// waitReady prints the status table whenever it changes, until every
// ManifestSync is Ready, and one of a namespaceSelector target has
// Synced a row per namespace the demo labelled for it (true), the context
// ends, or, when bounded, the deadline passes (false).
func waitReady(ctx context.Context, c client.Client, examples []example, bounded bool, deadline time.Time) bool {
	rows := map[client.ObjectKey]int{}
	for _, ex := range examples {
		rows[client.ObjectKeyFromObject(ex.ms)] = len(ex.labelled)
	}
	return printUntil(ctx, bounded, deadline, func() (string, bool, error) { return statusTable(ctx, c, rows) })
}

// waitAvailable prints the table of Deployments whenever it changes, until
// every one is Available (true), the context ends, or, when bounded, the
// deadline passes (false).
func waitAvailable(ctx context.Context, c client.Client, bounded bool, deadline time.Time) bool {
	return printUntil(ctx, bounded, deadline, func() (string, bool, error) { return deploymentTable(ctx, c) })
}

// printUntil prints what table returns whenever it changes, each second,
// until it says done (true), the context ends, or, when bounded, the
// deadline passes (false).
func printUntil(ctx context.Context, bounded bool, deadline time.Time, table func() (string, bool, error)) bool {
	last := ""
	for {
		out, done, err := table()
		if err == nil && out != last {
			fmt.Print(out)
			last = out
		}
		if done {
			return true
		}
		if bounded && time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// deploymentTable is the table of every Deployment, as kubectl get
// deployments prints it, with its Available condition, and whether every
// one is Available with all its replicas.
func deploymentTable(ctx context.Context, c client.Client) (string, bool, error) {
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list); err != nil {
		return "", false, err
	}
	b := strings.Builder{}
	b.WriteString("\n")
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAMESPACE\tDEPLOYMENT\tREADY\tUP-TO-DATE\tAVAILABLE\tCONDITION")
	all := len(list.Items) > 0
	for _, d := range list.Items {
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		cond := "Available=Unknown"
		for _, dc := range st.Conditions {
			if dc.Type == appsv1.DeploymentAvailable {
				cond = fmt.Sprintf("Available=%s (%s)", dc.Status, dc.Reason)
				all = all && dc.Status == corev1.ConditionTrue
			}
		}
		all = all && cond != "Available=Unknown" && st.ObservedGeneration == d.Generation && st.AvailableReplicas == want
		fmt.Fprintf(w, "%s\t%s\t%d/%d\t%d\t%d\t%s\n", d.Namespace, d.Name, st.ReadyReplicas, want, st.UpdatedReplicas, st.AvailableReplicas, cond)
	}
	if err := w.Flush(); err != nil {
		return "", false, err
	}
	return b.String(), all, nil
}

// statusTable is the table of every ManifestSync, as engine status
// prints it, and whether every one is Ready with at least rows[its key]
// target rows Synced.
func statusTable(ctx context.Context, c client.Client, rows map[client.ObjectKey]int) (string, bool, error) {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list); err != nil {
		return "", false, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	items := make([]view.Summary, len(list.Items))
	allReady := len(list.Items) > 0
	for i := range list.Items {
		items[i] = view.Summarize(&list.Items[i])
		allReady = allReady && ready(items[i], rows[client.ObjectKeyFromObject(&list.Items[i])])
	}
	b := strings.Builder{}
	b.WriteString("\n")
	if err := view.WriteTable(&b, items, view.Options{MessageWidth: 60}); err != nil {
		return "", false, err
	}
	return b.String(), allReady, nil
}

// ready is true when a ManifestSync is Ready and has at least rows
// target rows Synced: a namespaceSelector target is Ready at once with no
// namespace yet, before the demo's labelled ones are seen.
func ready(s view.Summary, rows int) bool {
	return s.Ready == string(metav1.ConditionTrue) && s.TargetsSynced >= rows
}

// showObjects lists what every ManifestSync produced, from its inventory,
// as engine status shows it.
func showObjects(ctx context.Context, c client.Client) error {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list); err != nil {
		return err
	}
	say("objects the ManifestSyncs produced (bin/engine status NAME -n NAMESPACE --kubeconfig bin/demo/kubeconfig shows one)")
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MANIFESTSYNC\tTARGET\tOBJECT\tSTATE")
	for i := range list.Items {
		ms := &list.Items[i]
		d, err := view.Describe(ms, 0)
		if err != nil {
			return err
		}
		for _, t := range d.Targets {
			for _, o := range t.Objects {
				fmt.Fprintf(w, "%s/%s\t%s\t%s\t%s\n", ms.Namespace, ms.Name, t.Name, o.Object, o.State)
			}
		}
	}
	return w.Flush()
}
