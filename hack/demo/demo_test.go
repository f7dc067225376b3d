package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/doccmd"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/view"
)

// TestDemo runs the demo as `DEMO_EXIT=1 make demo` does: every example
// must be Ready on the local control plane within its bound, the mirror
// example must have made its copies in the namespaces the demo labelled,
// engine diff must find nothing to change in the sync file the demo wrote
// for each example, the web UI's overview must list every example, and
// then, unless DEMO_DOC_COMMANDS=0, every command of README.md and docs/
// that talks to the demo's cluster must exit as its page says.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and the operator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout+3*time.Minute)
	defer cancel()
	whenReady := func(ctx context.Context, d *demo) error {
		checkMirrorCopies(ctx, t, d)
		checkDiffsClean(ctx, t, d)
		checkUI(ctx, t, d)
		if os.Getenv("DEMO_DOC_COMMANDS") != "0" {
			runDocCommands(ctx, t, d)
		}
		return nil
	}
	// A free port: a UI (or a demo) of the user's may hold the default.
	if err := run(ctx, options{exitWhenReady: true, whenReady: whenReady, uiAddr: "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
}

// checkMirrorCopies checks that the mirror example copied into each
// namespace the demo labelled for it what its expected.yaml says it copies
// into each namespace of namespaces.yaml (team-a there is mirror-team-a in
// the demo), and nothing that it leaves out.
func checkMirrorCopies(ctx context.Context, t *testing.T, d *demo) {
	t.Helper()
	i := slices.IndexFunc(d.examples, func(ex example) bool { return ex.ms.Name == "mirror" })
	if i < 0 {
		t.Fatal("the demo did not apply examples/mirror")
	}
	ex := d.examples[i]
	if len(ex.labelled) == 0 {
		t.Fatal("the demo labelled no namespace for examples/mirror: it copies nothing")
	}
	expected, err := decodeObjects(filepath.Join(d.root, "examples", "mirror", "expected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range expected {
		want := unstructured.Unstructured{Object: o}
		ns := "mirror-" + want.GetNamespace()
		if !slices.Contains(ex.labelled, ns) {
			t.Errorf("expected.yaml copies %s %s/%s, but the demo labelled %v", want.GetKind(), want.GetNamespace(), want.GetName(), ex.labelled)
			continue
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(want.GroupVersionKind())
		if err := d.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: want.GetName()}, got); err != nil {
			t.Errorf("the mirror example's copy %s %s/%s: %v", want.GetKind(), ns, want.GetName(), err)
		}
	}
	for _, ns := range ex.labelled {
		err := d.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "internal-ca-key"}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s/internal-ca-key, which the mirror example excludes: %v, want not found", ns, err)
		}
	}
}

// checkUI checks that the web UI the demo serves answers at the address it
// printed, with an overview listing every example's ManifestSync (a row
// tr[data-ms="NAMESPACE/NAME"], Ready): its watch has seen them all
// within a few seconds of their being Ready.
func checkUI(ctx context.Context, t *testing.T, d *demo) {
	t.Helper()
	if !strings.HasPrefix(d.ui, "http://127.0.0.1:") {
		t.Fatalf("the demo's UI is at %q, want http://127.0.0.1:PORT/", d.ui)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	var missing []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.ui, nil)
		if err != nil {
			t.Fatal(err)
		}
		missing = nil
		res, err := c.Do(req)
		if err != nil {
			missing = []string{err.Error()}
		} else {
			body, rerr := io.ReadAll(io.LimitReader(res.Body, 8<<20))
			res.Body.Close()
			switch {
			case rerr != nil:
				missing = []string{rerr.Error()}
			case res.StatusCode != http.StatusOK:
				missing = []string{fmt.Sprintf("GET %s: %s", d.ui, res.Status)}
			default:
				for _, ex := range d.examples {
					row := fmt.Sprintf(`data-ms="%s/%s"`, ex.ms.Namespace, ex.ms.Name)
					i := strings.Index(string(body), row)
					if i < 0 {
						missing = append(missing, ex.ms.Namespace+"/"+ex.ms.Name)
						continue
					}
					// The row's tag, all its attributes.
					start := max(0, strings.LastIndex(string(body[:i]), "<tr"))
					tag, _, _ := strings.Cut(string(body[start:]), ">")
					if !strings.Contains(tag, `data-ready="True"`) {
						missing = append(missing, ex.ms.Namespace+"/"+ex.ms.Name+" (not Ready: "+tag+")")
					}
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the UI's overview at %s lacks rows tr[data-ms] for, or shows not Ready: %v", d.ui, missing)
		}
	}
	// The diff tab evaluates each example as engine diff does (engine ui's
	// evaluator, as the cluster's administrator): nothing would change.
	// Targets of another cluster are dry-run there, with their kubeconfig
	// Secret's credentials: each must be compared, Unchanged, too.
	for _, ex := range d.examples {
		url := fmt.Sprintf("%sms/%s/%s/diff", d.ui, ex.ms.Namespace, ex.ms.Name)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		dc := &http.Client{Timeout: 2 * time.Minute}
		res, err := dc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		body, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %v", url, res.Status, err)
		}
		page := string(body)
		changes := regexp.MustCompile(`data-action="(Created|Configured|Pruned|Conflict|Failed)"`).FindAllString(page, -1)
		compared := strings.Contains(page, `data-action="Unchanged"`) || strings.Contains(page, "Nothing would change")
		var uncompared []string // remote targets with no Unchanged row
		for _, target := range ex.ms.Spec.Targets {
			row := regexp.MustCompile(`data-action="Unchanged" data-target="` + regexp.QuoteMeta(target.Name) + `(/[^"]*)?"`)
			if target.Cluster != nil && !row.MatchString(page) {
				uncompared = append(uncompared, target.Name)
			}
		}
		if len(changes) > 0 || !compared || len(uncompared) > 0 || strings.Contains(page, `class="flash error"`) {
			t.Errorf("the UI's diff of %s/%s is not clean (changes %v, remote targets not Unchanged %v):\n%s",
				ex.ms.Namespace, ex.ms.Name, changes, uncompared, mainOf(page))
		}
	}
}

// mainOf is the <main> element of a page, for messages.
func mainOf(page string) string {
	if i := strings.Index(page, "<main"); i >= 0 {
		page = page[i:]
	}
	if i := strings.Index(page, "</main>"); i >= 0 {
		page = page[:i]
	}
	return page
}

// checkDiffsClean runs engine diff on every sync file the demo wrote to
// bin/demo/examples, for the targets in the demo's own cluster (diff
// compares no other), once every ManifestSync is Ready: each must exit 0,
// nothing to change, or the files do not say what the demo applied.
func checkDiffsClean(ctx context.Context, t *testing.T, d *demo) {
	t.Helper()
	for _, ex := range d.examples {
		args := []string{"diff", "-f", filepath.Join("bin", "demo", "examples", ex.ms.Name, "sync.yaml"), "--kubeconfig", d.kubeconfig}
		local := 0
		for _, target := range ex.ms.Spec.Targets {
			if target.Cluster == nil {
				args = append(args, "--target", target.Name)
				local++
			}
		}
		if local == 0 {
			continue // dr-namespace: its one target is a remote cluster's
		}
		if ex.ms.Spec.Decryption != nil { // sops-secret: its demo key
			args = append(args, "--sops-age-key-file", filepath.Join("examples", ex.ms.Name, "demo.agekey"))
		}
		cmd := exec.CommandContext(ctx, d.engine, args...)
		cmd.Dir = d.root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("engine %s: %v, want exit 0 (nothing to change):\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// runDocCommands runs, from the repository's root, every command of
// README.md and docs/ that talks to the demo's cluster (it names
// bin/demo/kubeconfig), and checks that each exits as its page says.
func runDocCommands(ctx context.Context, t *testing.T, d *demo) {
	t.Helper()
	cmds, err := doccmd.FromRepo(d.root)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, c := range cmds {
		if !c.Cluster {
			continue
		}
		ran++
		cmd := exec.CommandContext(ctx, "bash", "-c", c.Text)
		cmd.Dir = d.root
		out, err := cmd.CombinedOutput()
		got := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			got = ee.ExitCode()
		case err != nil:
			t.Errorf("%s:%d: %s: %v", c.File, c.Line, c.Text, err)
			continue
		}
		if got != c.Exit {
			t.Errorf("%s:%d: %s exited %d, want %d:\n%s", c.File, c.Line, c.Text, got, c.Exit, out)
		}
	}
	if ran == 0 {
		t.Errorf("no command of README.md or docs/ talks to the demo's cluster (names %s)", doccmd.DemoKubeconfig)
	}
	t.Logf("ran %d commands of README.md and docs/ against the demo's cluster", ran)
}

// TestDemoInterrupted runs the demo program as make demo does and presses
// Ctrl-C (SIGINT to its process group, as a terminal sends it) while it
// waits for the examples: it must stop everything it started, the API
// server too, and exit 0, or make demo ends in an error.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and the operator")
	}
	exe := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(exe)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "DEMO_EXIT=") })
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	group := -cmd.Process.Pid
	defer func() { _ = syscall.Kill(group, syscall.SIGKILL) }()

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out strings.Builder
	waiting := time.After(5 * time.Minute)
	for waited := false; !waited; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended before it waited for the examples:\n%s\n%s", &out, &stderr)
			}
			fmt.Fprintln(&out, l)
			waited = strings.Contains(l, "waiting for them to be Ready")
		case <-waiting:
			t.Fatalf("the demo did not come to wait for the examples within 5m:\n%s\n%s", &out, &stderr)
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(root, "bin", "demo", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}

	if err := syscall.Kill(group, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for l := range lines {
			fmt.Fprintln(&out, l)
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after Ctrl-C the demo ended with %v, want exit status 0:\n%s\n%s", err, &out, &stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo did not end within 2m of Ctrl-C:\n%s\n%s", &out, &stderr)
	}
	if !strings.Contains(out.String(), "==> stopped") {
		t.Errorf("the demo did not say it stopped:\n%s", &out)
	}
	for name, cluster := range kc.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
			c.Close()
			t.Errorf("the API server of cluster %s (%s) still accepts connections after the demo ended", name, u.Host)
		}
	}
}

// Ctrl-C is how a demo ends: whatever step it interrupted, the exit status
// is 0; a failure is 1 and says why.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		interrupted bool
		want        int
		stderr      string
	}{
		{"ended", nil, false, 0, ""},
		{"failed", errors.New("no assets"), false, 1, "demo: no assets\n"},
		{"interrupted while waiting", nil, true, 0, ""},
		{"interrupted mid-step", fmt.Errorf("building engine: %w", context.Canceled), true, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w strings.Builder
			if got := exitCode(&w, tc.err, tc.interrupted); got != tc.want {
				t.Errorf("exit status %d, want %d", got, tc.want)
			}
			if w.String() != tc.stderr {
				t.Errorf("stderr %q, want %q", w.String(), tc.stderr)
			}
		})
	}
}

// The demo sets controller-runtime's logger: errors show, the client's
// chatter does not (and no stack trace says SetLogger was never called).
// The logger is tested as made, not through controller-runtime's global
// one: that takes the first logger set in a process only (TestDemo's).
func TestQuietLogs(t *testing.T) {
	var buf bytes.Buffer
	log := quietLogs(&buf)
	log.WithName("KubeAPIWarningLogger").Info("metadata.finalizers: prefer a domain-qualified finalizer name")
	if buf.Len() != 0 {
		t.Errorf("an info line was logged: %s", &buf)
	}
	log.Error(errors.New("boom"), "creating the object set")
	if !strings.Contains(buf.String(), "creating the object set") || !strings.Contains(buf.String(), "boom") {
		t.Errorf("the error was not logged: %q", &buf)
	}
	if n := strings.Count(strings.TrimSpace(buf.String()), "\n"); n != 0 || strings.Contains(buf.String(), "demo_test.go") {
		t.Errorf("the error took %d more lines (a stack trace?): %q", n, &buf)
	}
}

// The mirror example's namespaceSelector picks the namespaces of its
// namespaces.yaml labelled mirror=yes: the demo makes those (prefixed, as
// every example's), with their labels, and not the others; an example
// without the file gets one namespace labelled as its selector says.
func TestLabelNamespaces(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "examples", "mirror")
	b, err := os.ReadFile(filepath.Join(dir, "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sf, err := engine.LoadSyncFile(filepath.Join(dir, "sync.yaml"), b)
	if err != nil {
		t.Fatal(err)
	}
	target := &sf.Sync.Spec.Targets[0]
	if target.NamespaceSelector == nil {
		t.Fatalf("examples/mirror's first target %q has no namespaceSelector", target.Name)
	}
	c := fake.NewClientBuilder().Build()
	ctx := context.Background()
	got, err := labelNamespaces(ctx, c, dir, target)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"mirror-team-a", "mirror-team-b"}; !slices.Equal(got, want) {
		t.Fatalf("labelled %v, want %v", got, want)
	}
	for _, name := range got {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			t.Fatal(err)
		}
		if ns.Labels["mirror"] != "yes" {
			t.Errorf("namespace %s has labels %v, want mirror=yes", name, ns.Labels)
		}
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "mirror-kube-system"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace mirror-kube-system, which the selector does not match: %v, want not found", err)
	}

	bare := t.TempDir()
	got, err = labelNamespaces(ctx, c, filepath.Join(bare, "fan"), target)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fan-" + target.Name}; !slices.Equal(got, want) {
		t.Fatalf("without namespaces.yaml: labelled %v, want %v", got, want)
	}
}

// A ManifestSync is done for the demo when it is Ready and has Synced a
// target row per namespace the demo labelled for it: the mirror example
// is Ready at once, before the operator sees those namespaces, with
// "Synced 0/0 ... to 0 targets".
func TestReadyWaitsForLabelledNamespaces(t *testing.T) {
	readyNone := view.Summary{Ready: "True", TargetsSynced: 0, TargetsTotal: 0}
	readyTwo := view.Summary{Ready: "True", TargetsSynced: 2, TargetsTotal: 2}
	if ready(readyNone, 2) {
		t.Error("Ready with no target row synced counts as done, with 2 namespaces labelled")
	}
	if !ready(readyTwo, 2) {
		t.Error("Ready with both labelled namespaces synced is not done")
	}
	if !ready(readyNone, 0) {
		t.Error("Ready, with nothing labelled, is not done")
	}
	if ready(view.Summary{Ready: "False", TargetsSynced: 2}, 2) {
		t.Error("not Ready counts as done")
	}
}

// The closing hint names bin/engine and bin/demo/kubeconfig as a user in
// the repository's root types them, and no kubectl; it says how to diff
// an example as the demo applied it.
func TestShownPaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	hint := closingHint(filepath.Join(wd, "bin", "engine"), filepath.Join(wd, "bin", "demo", "kubeconfig"), "http://127.0.0.1:8090/")
	for _, want := range []string{
		"\n    UI: http://127.0.0.1:8090/\n",
		"\n    bin/engine status --kubeconfig bin/demo/kubeconfig\n",
		"\n    bin/engine status mirror -n platform --kubeconfig bin/demo/kubeconfig\n",
		"\n==> bin/demo/examples/NAME/sync.yaml is each example as the demo applied it",
		"\n    bin/engine diff -f bin/demo/examples/replicate-secret/sync.yaml --kubeconfig bin/demo/kubeconfig\n",
	} {
		if !strings.Contains(hint, want) {
			t.Errorf("the closing hint lacks %q:\n%s", want, hint)
		}
	}
	if strings.Contains(hint, "kubectl") {
		t.Errorf("the closing hint names kubectl, which the project does not provide:\n%s", hint)
	}
	if got, want := shown(filepath.Join(wd, "bin", "demo", "kubeconfig")), filepath.Join("bin", "demo", "kubeconfig"); got != want {
		t.Errorf("shown = %q, want %q", got, want)
	}
	outside := filepath.Join(filepath.Dir(wd), "elsewhere", "kubeconfig")
	if got := shown(outside); got != outside {
		t.Errorf("shown(%q) = %q, want it absolute", outside, got)
	}
}

// make demo installs only what the demo runs: etcd (for the control
// plane) and git (its git daemon), not the tests' sshd and registry; and
// it runs the demo built, so that Ctrl-C ends it with exit status 0.
func TestDemoInstallsOnlyItsPackages(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	list := func(set string) []string {
		out, err := exec.Command(filepath.Join(root, "hack", "test-deps.sh"), set, "--list").Output()
		if err != nil {
			t.Fatalf("hack/test-deps.sh %s --list: %v", set, err)
		}
		return strings.Fields(string(out))
	}
	if got, want := list("demo"), []string{"etcd-server", "git"}; !slices.Equal(got, want) {
		t.Errorf("the demo's packages are %v, want %v", got, want)
	}
	tests := list("test")
	for _, p := range []string{"etcd-server", "git", "openssh-server", "docker-registry"} {
		if !slices.Contains(tests, p) {
			t.Errorf("the tests' packages %v lack %s", tests, p)
		}
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, ok := strings.Cut(string(makefile), "\ndemo:")
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	if !ok || !strings.Contains(recipe, "\thack/test-deps.sh demo\n") {
		t.Errorf("make demo's recipe does not run hack/test-deps.sh demo:%s", recipe)
	}
	// go run exits 1 after a Ctrl-C whatever the demo's exit status, and
	// make demo would end in "Error 1".
	if strings.Contains(recipe, " run ./hack/demo") {
		t.Errorf("make demo's recipe runs the demo with go run:%s", recipe)
	}
}

// TestGitDaemonStops: stopping the demo's git server stops the server
// itself, not only the `git` that started it (git-daemon, its child,
// kept the port and outlived every demo).
func TestGitDaemonStops(t *testing.T) {
	url, stop, err := startGitDaemon(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(url, "git://")
	stop()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return // nothing listens any more
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections after the git server was stopped", addr)
		}
	}
}

// The demo writes each example as it applied it to bin/demo/examples/NAME:
// a sync file that loads as the ManifestSync it created (renamed, target
// namespaces prefixed) and, beside it, the local copies of its object and
// object set sources as it created them, which engine diff reads in place
// of the files under examples/ (whose names do not match the cluster's).
func TestPrepareExampleWritesWhatItApplied(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	work := t.TempDir()
	for _, tc := range []struct {
		example, source string
		// objects are those the source's local copy must hold, as
		// namespace/name.
		objects []string
	}{
		{"replicate-secret", "tls", []string{"platform/wildcard-tls"}},
		{"mirror", "shared", nil},
	} {
		t.Run(tc.example, func(t *testing.T) {
			dir := filepath.Join(root, "examples", tc.example)
			applied := filepath.Join(work, "examples", tc.example)
			ex, err := prepareExample(ctx, c, dir, applied, filepath.Join(work, "git"), "git://127.0.0.1:1", filepath.Join(work, "kubeconfig"))
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(applied, "sync.yaml")
			if err := writeSyncFile(file, dir, ex.ms); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			sf, err := engine.LoadSyncFile(file, b)
			if err != nil {
				t.Fatalf("the sync file the demo wrote does not load: %v\n%s", err, b)
			}
			if sf.Sync.Name != tc.example || sf.Sync.Namespace != ex.ms.Namespace {
				t.Errorf("the sync file names %s/%s, want %s/%s", sf.Sync.Namespace, sf.Sync.Name, ex.ms.Namespace, tc.example)
			}
			if !reflect.DeepEqual(sf.Sync.Spec, ex.ms.Spec) {
				t.Errorf("the sync file's spec differs from the one applied:\n%+v\nwant\n%+v", sf.Sync.Spec, ex.ms.Spec)
			}
			for _, target := range sf.Sync.Spec.Targets {
				if target.Namespace != "" && !strings.HasPrefix(target.Namespace, tc.example+"-") {
					t.Errorf("target %q: namespace %q is not prefixed with the example's name", target.Name, target.Namespace)
				}
			}
			if !strings.Contains(string(b), "bin/engine diff -f ") {
				t.Errorf("the sync file's header does not say how to diff it:\n%s", b)
			}
			copied, err := decodeObjects(filepath.Join(applied, tc.source+".yaml"))
			if err != nil {
				t.Fatalf("the local copy of source %q: %v", tc.source, err)
			}
			want := tc.objects
			if want == nil {
				// The object set: every object the demo created from
				// the example's file, Jobs left out.
				orig, err := decodeObjects(filepath.Join(dir, tc.source+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range orig {
					u := unstructured.Unstructured{Object: o}
					if u.GetKind() != "Job" {
						want = append(want, u.GetNamespace()+"/"+u.GetName())
					}
				}
			}
			var got []string
			for _, o := range copied {
				u := &unstructured.Unstructured{Object: o}
				got = append(got, u.GetNamespace()+"/"+u.GetName())
				if u.GetResourceVersion() != "" || u.GetUID() != "" {
					t.Errorf("the local copy of %s %s/%s holds what the server set (resourceVersion %q, uid %q)", u.GetKind(), u.GetNamespace(), u.GetName(), u.GetResourceVersion(), u.GetUID())
				}
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(u.GroupVersionKind())
				if err := c.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
					t.Errorf("the local copy holds %s %s/%s, which the demo did not create: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
					continue
				}
				// platform/wildcard-tls is replicate-secret's (made
				// first here), not the mirror example's file's: the
				// copy is what the operator reads.
				stripServerFields(live)
				if !reflect.DeepEqual(u.Object, live.Object) {
					t.Errorf("the local copy of %s %s/%s is not the object the cluster holds (labels %v, want %v)", u.GetKind(), u.GetNamespace(), u.GetName(), u.GetLabels(), live.GetLabels())
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("the local copy of source %q holds %v, want %v", tc.source, got, want)
			}
		})
	}
}
