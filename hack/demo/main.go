// Command demo runs ManifestSync end to end on this machine: it starts a
// local control plane (etcd, kube-apiserver, and, so that workloads roll
// out, kube-scheduler, kube-controller-manager and kwok's fake nodes: the
// assets `make envtest` provides in bin/envtest), installs the CRD, runs
// `engine operator` against it, serves the examples' Git sources from a git
// daemon on 127.0.0.1, applies the examples, and shows each ManifestSync's
// status, the objects it produced and its Deployments rolling out. It runs
// until interrupted; with DEMO_EXIT=1 it exits 0 once every ManifestSync is
// Ready and every Deployment Available, and 1 if one is not within two
// minutes. `make demo` runs it.
package main

import (
	"context"
	"errors"
	"fmt"
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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/view"
	"github.com/manifestsync/manifestsync/stdlib"
)

// readyTimeout bounds the wait for Ready under DEMO_EXIT=1.
const readyTimeout = 2 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DEMO_EXIT") == "1"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, exitWhenReady bool) error {
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

	say("running engine operator (logs: bin/demo/operator.log)")
	stopOperator, err := startOperator(ctx, root, work, kubeconfig)
	if err != nil {
		return err
	}
	defer stopOperator()

	syncs, err := applyExamples(ctx, c, root, work, gitURL)
	if err != nil {
		return err
	}
	say(fmt.Sprintf("applied %d examples; waiting for them to be Ready", len(syncs)))
	deadline := time.Now().Add(readyTimeout)
	ready := waitReady(ctx, c, exitWhenReady, deadline)
	if err := showObjects(ctx, c); err != nil {
		return err
	}
	if exitWhenReady && !ready {
		return fmt.Errorf("not every ManifestSync was Ready within %s (see bin/demo/operator.log)", readyTimeout)
	}
	say("the Deployments roll out on kwok's fake nodes " + strings.Join(workloads.Nodes, ", "))
	available := waitAvailable(ctx, c, exitWhenReady, deadline)
	if exitWhenReady {
		if !available {
			return fmt.Errorf("not every Deployment was Available within %s (see bin/demo/workloads)", readyTimeout)
		}
		say("every ManifestSync is Ready and every Deployment Available")
		return nil
	}
	say("the control plane keeps running; use it with: kubectl --kubeconfig " + kubeconfig + " get msync -A")
	say("press Ctrl-C to stop")
	<-ctx.Done()
	return nil
}

func say(msg string) { fmt.Printf("==> %s\n", msg) }

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
// control plane.
func startOperator(ctx context.Context, root, work, kubeconfig string) (func(), error) {
	bin := filepath.Join(root, "bin", "engine")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/engine")
	build.Dir, build.Stdout, build.Stderr = root, os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building engine: %w", err)
	}
	logFile, err := os.Create(filepath.Join(work, "operator.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "operator", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(work, "cache"))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting engine operator: %w", err)
	}
	return func() {
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
	}, nil
}

// applyExamples creates, for every example that is meant to sync (those
// with an expected.yaml), its namespaces and object sources, publishes its
// Git sources on the daemon, points the spec at them, and creates the
// ManifestSync.
func applyExamples(ctx context.Context, c client.Client, root, work, gitURL string) ([]*v1alpha1.ManifestSync, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "examples", "*", "expected.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*v1alpha1.ManifestSync
	for _, expected := range dirs {
		dir := filepath.Dir(expected)
		ms, err := prepareExample(ctx, c, dir, filepath.Join(work, "git"), gitURL, filepath.Join(work, "kubeconfig"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		if err := c.Create(ctx, ms); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(dir), err)
		}
		fmt.Printf("    %-20s ManifestSync %s/%s, %d targets\n", filepath.Base(dir), ms.Namespace, ms.Name, len(ms.Spec.Targets))
		out = append(out, ms)
	}
	return out, nil
}

func prepareExample(ctx context.Context, c client.Client, dir, repos, gitURL, kubeconfig string) (*v1alpha1.ManifestSync, error) {
	b, err := os.ReadFile(filepath.Join(dir, "sync.yaml"))
	if err != nil {
		return nil, err
	}
	sf, err := engine.LoadSyncFile(filepath.Join(dir, "sync.yaml"), b)
	if err != nil {
		return nil, err
	}
	ms := sf.Sync
	// Several examples render the same app into the same namespaces; in
	// one cluster they would conflict (which the operator reports), so
	// each example gets namespaces of its own.
	example := filepath.Base(dir)
	ms.Name = example
	if err := ensureNamespace(ctx, c, ms.Namespace); err != nil {
		return nil, err
	}
	for i := range ms.Spec.Targets {
		t := &ms.Spec.Targets[i]
		if t.Namespace == "" {
			continue
		}
		t.Namespace = example + "-" + t.Namespace
		if t.Cluster != nil {
			// The local control plane stands in for the remote cluster
			// too: the target gets namespaces of its own, and its
			// kubeconfig Secret points at the same API server.
			ref := t.Cluster.KubeConfigSecretRef
			t.Namespace = example + "-" + ref.Name + "-" + strings.TrimPrefix(t.Namespace, example+"-")
			if err := createKubeconfigSecret(ctx, c, ms.Namespace, ref, kubeconfig); err != nil {
				return nil, fmt.Errorf("target %q: %w", t.Name, err)
			}
		}
		if err := ensureNamespace(ctx, c, t.Namespace); err != nil {
			return nil, err
		}
	}
	for i := range ms.Spec.Sources {
		src := &ms.Spec.Sources[i]
		switch {
		case src.Object != nil:
			if err := createObjectSource(ctx, c, ms.Namespace, filepath.Join(dir, src.Name+".yaml")); err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
		case src.Objects != nil:
			if err := createObjectSet(ctx, c, ms.Namespace, filepath.Join(dir, src.Name+".yaml")); err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
		case src.Git != nil:
			if err := publishGitSource(dir, repos, gitURL, src); err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
		}
		if src.Cluster != nil {
			// The local control plane stands in for the cluster the
			// source reads, as for remote targets.
			if err := createKubeconfigSecret(ctx, c, ms.Namespace, src.Cluster.KubeConfigSecretRef, kubeconfig); err != nil {
				return nil, fmt.Errorf("source %q: %w", src.Name, err)
			}
		}
	}
	return ms, nil
}

// createObjectSet creates the objects an example keeps beside its
// sync.yaml for an object set source (NAME.yaml, as kubectl get -o yaml
// prints them), when there is such a file; without one the set starts
// empty. The file is a copy of what a cluster held: what its API server
// set or allocated (status, uids, cluster IPs, node ports) goes as the dr
// module strips it, and Jobs, whose selectors hold the other cluster's
// uids, are left out.
func createObjectSet(ctx context.Context, c client.Client, namespace, file string) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	docs, err := stdlib.DecodeYAMLStream(b)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var objs []any
	for _, d := range docs {
		m, ok := d.Value.(map[string]any)
		if !ok {
			continue
		}
		if items, ok := m["items"].([]any); ok && m["kind"] == "List" {
			objs = append(objs, items...)
		} else {
			objs = append(objs, m)
		}
	}
	clean, err := stdlib.DRCopy(objs, stdlib.DROptions{Active: true, StripNodePorts: true})
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
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
	}
	return nil
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
// sync.yaml, in the ManifestSync's namespace unless it names its own.
func createObjectSource(ctx context.Context, c client.Client, namespace, file string) error {
	snap, err := source.ObjectFile(file)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: snap.Object}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	// The file is a copy of what a cluster held: drop what the server sets.
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetCreationTimestamp(metav1.Time{})
	obj.SetManagedFields(nil)
	err = c.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// waitReady prints the status table whenever it changes, until every
// ManifestSync is Ready (true), the context ends, or, when bounded, the
// deadline passes (false).
func waitReady(ctx context.Context, c client.Client, bounded bool, deadline time.Time) bool {
	return printUntil(ctx, bounded, deadline, func() (string, bool, error) { return statusTable(ctx, c) })
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
// prints it, and whether every one is Ready.
func statusTable(ctx context.Context, c client.Client) (string, bool, error) {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list); err != nil {
		return "", false, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	items := make([]view.Summary, len(list.Items))
	allReady := len(list.Items) > 0
	for i := range list.Items {
		items[i] = view.Summarize(&list.Items[i])
		allReady = allReady && items[i].Ready == "True"
	}
	b := strings.Builder{}
	b.WriteString("\n")
	if err := view.WriteTable(&b, items, view.Options{MessageWidth: 60}); err != nil {
		return "", false, err
	}
	return b.String(), allReady, nil
}

// showObjects lists what every ManifestSync produced, from its inventory,
// as engine status shows it.
func showObjects(ctx context.Context, c client.Client) error {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list); err != nil {
		return err
	}
	say("objects the ManifestSyncs produced (engine status NAME -n NAMESPACE shows one)")
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
