package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// engineUI is `engine ui` running in a process of its own against the
// test cluster, as a user starts it.
type engineUI struct {
	cmd    *exec.Cmd
	url    string // http://127.0.0.1:PORT/, as it printed it
	stderr *gittest.Buffer
	exited chan error // Wait's
	// waited is set once exited was received from: the process is gone.
	waited bool
}

// startEngineUI starts engine ui with args (after the cluster's
// kubeconfig and context) and env added to the test's environment, and
// waits for the line that says where it serves.
func startEngineUI(t *testing.T, env []string, args ...string) *engineUI {
	t.Helper()
	engine, err := exec.LookPath(programName) // testscript.Main's
	if err != nil {
		t.Fatal(err)
	}
	ui := &engineUI{stderr: &gittest.Buffer{}, exited: make(chan error, 1)}
	ui.cmd = exec.Command(engine, append([]string{"ui", "--kubeconfig", cluster.kubeconfig, "--context", "envtest"}, args...)...)
	ui.cmd.Env = append(os.Environ(), env...)
	ui.cmd.Stderr = ui.stderr
	stdout, err := ui.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !ui.waited {
			_ = ui.cmd.Process.Kill()
			if err := <-ui.exited; err == nil {
				t.Log("engine ui exited 0 before the test ended")
			}
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // only the first line matters
			}
		}
		ui.exited <- ui.cmd.Wait()
	}()
	select {
	case l := <-lines:
		addr, ok := strings.CutPrefix(l, "ui: serving on ")
		if !ok {
			t.Fatalf("engine ui printed %q, want ui: serving on http://ADDR/\n%s", l, ui.stderr.String())
		}
		ui.url = addr
	case err := <-ui.exited:
		ui.waited = true
		t.Fatalf("engine ui exited before it served: %v\n%s", err, ui.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("engine ui did not say where it serves within a minute\n%s", ui.stderr.String())
	}
	return ui
}

// stop interrupts engine ui as Ctrl-C does: it must exit 0, within
// seconds.
func (ui *engineUI) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := ui.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ui.exited:
		ui.waited = true
		if err != nil {
			t.Errorf("engine ui after %v: %v, want exit status 0\n%s", sig, err, ui.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("engine ui did not stop within 15s of %v\n%s", sig, ui.stderr.String())
	}
}

// get fetches url (with the Host header host, unless empty) and returns
// the status and body.
func get(t *testing.T, rawURL, host string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	// Redirects are answers of their own here (the login page's).
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// engine ui against the test cluster, on a port it picks: it says where
// it serves, its overview lists a ManifestSync of the cluster (and the
// page follows a new one), it refuses a request naming another host (DNS
// rebinding), --open runs the browser on its address, and SIGINT and
// SIGTERM end it with exit status 0.
func TestUI(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://example.com/config.git", Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: ns}},
			Suspend: true, // the operator leaves it alone
		},
	}
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ms) })

	// A browser that writes down what it was asked to open.
	bin := t.TempDir()
	opened := filepath.Join(t.TempDir(), "opened")
	script := "#!/bin/sh\nprintf '%s\\n' \"$*\" > " + opened + "\n"
	for _, name := range []string{"xdg-open", "open"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ui := startEngineUI(t, []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}, "--addr", "127.0.0.1:0", "--open")
	u, err := url.Parse(ui.url)
	if err != nil || u.Scheme != "http" || u.Path != "/" {
		t.Fatalf("engine ui serves on %q, want http://127.0.0.1:PORT/", ui.url)
	}
	if host, port, _ := net.SplitHostPort(u.Host); host != "127.0.0.1" || port == "0" || port == "" {
		t.Errorf("engine ui serves on %s, want 127.0.0.1 and the port it picked", u.Host)
	}

	row := func(name string) string { return fmt.Sprintf(`data-ms="%s/%s"`, ns, name) }
	testenv.Eventually(t, 30*time.Second, func() error {
		code, body := get(t, ui.url, "", nil)
		if code != http.StatusOK || !strings.Contains(body, row("web")) {
			return fmt.Errorf("GET %s: %d, want 200 with a row %s:\n%.2000s", ui.url, code, row("web"), body)
		}
		return nil
	})
	// The UI's watch follows the cluster: a ManifestSync created now is
	// listed too.
	other := ms.DeepCopy()
	other.ResourceVersion, other.Name = "", "api"
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, other) })
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, body := get(t, ui.url, "", nil); !strings.Contains(body, row("api")) {
			return fmt.Errorf("the overview does not list %s/api", ns)
		}
		return nil
	})
	// localhost names this machine too; another name may be an
	// attacker's domain resolving to 127.0.0.1.
	if code, _ := get(t, ui.url, "localhost:"+u.Port(), nil); code != http.StatusOK {
		t.Errorf("GET / with Host localhost: %d, want 200", code)
	}
	if code, body := get(t, ui.url, "rebind.example:"+u.Port(), nil); code == http.StatusOK || strings.Contains(body, row("web")) {
		t.Errorf("GET / with Host rebind.example: %d, want it refused:\n%.500s", code, body)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(opened)
		if err != nil {
			return fmt.Errorf("--open did not start the browser: %w", err)
		}
		if got := strings.TrimSpace(string(b)); got != ui.url {
			return fmt.Errorf("--open opened %q, want %q", got, ui.url)
		}
		return nil
	})
	ui.stop(t, syscall.SIGINT)
	if strings.Contains(ui.stderr.String(), "warning:") {
		t.Errorf("engine ui on loopback warned:\n%s", ui.stderr.String())
	}

	// SIGTERM (a service manager's stop) ends it as cleanly; without a
	// browser to start, --open says so and the UI serves on.
	ui = startEngineUI(t, []string{"PATH=" + t.TempDir()}, "--addr", "127.0.0.1:0", "--open")
	if code, _ := get(t, ui.url+"healthz", "", nil); code != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", code)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(ui.stderr.String(), "warning: ui: --open") {
			return fmt.Errorf("no warning that the browser could not be started:\n%s", ui.stderr.String())
		}
		return nil
	})
	ui.stop(t, syscall.SIGTERM)
}

// engine ui's usage errors exit 2 before anything is served: an address
// without a port, one of no interface of this machine (after the warning
// a non-loopback address gets), one already in use.
func TestUIUsageErrors(t *testing.T) {
	needCluster(t)
	code, _, stderr := engineCluster(t, "ui", "--addr", "localhost")
	if code != exitUsage || !strings.Contains(stderr, "--addr") {
		t.Errorf("engine ui --addr localhost: exit %d, stderr %q; want 2 naming --addr", code, stderr)
	}
	// An address of no interface here (TEST-NET-1): the warning that
	// a non-loopback address serves anyone comes first, then the listen
	// fails; nothing is exposed.
	code, _, stderr = engineCluster(t, "ui", "--addr", "192.0.2.1:0")
	if code != exitUsage || !strings.Contains(stderr, "warning: ui: --addr 192.0.2.1:0 is not a loopback address: anyone who reaches it acts as the kubeconfig's user") {
		t.Errorf("engine ui --addr 192.0.2.1:0: exit %d, stderr %q; want the warning, then exit 2", code, stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr = engineCluster(t, "ui", "--addr", ln.Addr().String())
	if code != exitUsage || !strings.Contains(stderr, "address already in use") {
		t.Errorf("engine ui --addr %s (taken): exit %d, stderr %q; want 2, address already in use", ln.Addr(), code, stderr)
	}
}

// engine operator refuses a malformed --ui-bind-address at once, before
// it looks for its cluster.
func TestOperatorUIBindAddressMalformed(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run([]string{"operator", "--ui-bind-address", "8090", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), `--ui-bind-address "8090": want [HOST]:PORT`) {
		t.Errorf("engine operator --ui-bind-address 8090: exit %d, stderr %q; want 2 naming the flag", code, stderr.String())
	}
}

// Which --addr is loopback (no warning), and the address a browser
// opens for a wildcard one.
func TestUIAddresses(t *testing.T) {
	for host, want := range map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true, "127.0.0.2": true,
		"": false, "0.0.0.0": false, "::": false, "192.0.2.1": false, "example.com": false} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
	for addr, want := range map[string]string{
		"127.0.0.1:8090": "http://127.0.0.1:8090/",
		"0.0.0.0:8090":   "http://127.0.0.1:8090/",
		"[::]:8090":      "http://127.0.0.1:8090/",
		"[::1]:8090":     "http://[::1]:8090/",
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := browserURL(tcp); got != want {
			t.Errorf("browserURL(%s) = %q, want %q", addr, got, want)
		}
	}
}

// engine operator --ui-bind-address serves the UI in cluster mode: the
// login page asks for a token; without one, or with one the API server
// rejects, a page sends to the login page, and the live stream and the
// actions answer 401; a service account's token is checked with a
// TokenReview and signs in. Off by default.
func TestOperatorUI(t *testing.T) {
	env := ownEnv(t)
	ctx := context.Background()
	addr := testenv.FreeAddr(t)
	op := startEngineOperatorAs(t, env, "operator", "--ui-bind-address", addr)
	base := "http://" + addr
	testenv.Eventually(t, time.Minute, func() error {
		res, err := http.Get(base + "/healthz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %d", res.StatusCode)
		}
		return nil
	})
	code, body := get(t, base+"/login", "", nil)
	if code != http.StatusOK || !strings.Contains(body, `id="token"`) || !strings.Contains(body, `type="password"`) {
		t.Errorf("GET /login: %d, want 200 with a password field #token:\n%.2000s", code, body)
	}
	const badToken = "not-a-token-the-api-server-knows"
	for _, header := range []map[string]string{nil, {"Authorization": "Bearer " + badToken}} {
		code, _ := get(t, base+"/", "", header)
		if code != http.StatusSeeOther && code != http.StatusFound {
			t.Errorf("GET / with %v: %d, want a redirect to /login", header, code)
		}
		if code, _ := get(t, base+"/stream", "", header); code != http.StatusUnauthorized {
			t.Errorf("GET /stream with %v: %d, want 401", header, code)
		}
		req, err := http.NewRequest(http.MethodPost, base+"/ms/default/web/actions/suspend", nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST an action with %v: %d, want 401", header, res.StatusCode)
		}
	}

	// A service account's token: the TokenReview accepts it, and the
	// overview is served as that account (which may list nothing).
	ns := env.Namespace(t, nil)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "viewer", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tok.Status.Token
	if code, body := get(t, base+"/", "", map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
		t.Errorf("GET / with a service account's token: %d, want 200:\n%.2000s", code, body)
	}
	logs := op.stop(t)
	for _, secret := range []string{token, badToken} {
		if strings.Contains(logs, secret) {
			t.Errorf("the operator logged a token")
		}
	}
	if !strings.Contains(logs, "serving the web UI") {
		t.Errorf("the operator did not log that it serves the UI:\n%s", logs)
	}
}
