package ui

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// env is the API server every test of the package shares; no operator
// runs against it: the tests write the statuses the UI shows.
var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env))
}

// logBuffer collects what a server logs, for tests of what it must never
// log.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.b.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testUI is a UI server on 127.0.0.1 with its logs, and every response
// body the test read through it.
type testUI struct {
	*httptest.Server
	logs *logBuffer

	mu     sync.Mutex
	bodies []string
}

// startUI serves a Server of opts (its Config the environment's admin
// when unset) on 127.0.0.1 with its watch running, until the test ends;
// it waits for the watch to list everything.
func startUI(t *testing.T, opts Options) *testUI {
	t.Helper()
	env.Need(t)
	logs := &logBuffer{}
	if opts.Config == nil {
		opts.Config = env.Config
	}
	opts.Log = logs.logger()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if _, synced := s.store.list(); !synced {
			return fmt.Errorf("the watch has not synced")
		}
		return nil
	})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &testUI{Server: srv, logs: logs}
}

// startCache starts a controller-runtime cache of the admin config, as the
// operator's manager holds one, until the test ends.
func startCache(t *testing.T) cache.Cache {
	t.Helper()
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the cache: %v", err)
		}
	})
	return c
}

// browser is an HTTP client with cookies that does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type response struct {
	status int
	header http.Header
	body   string
}

// do makes a request of the UI, with the bearer token when one is given,
// and keeps the body.
func (u *testUI) do(t *testing.T, c *http.Client, method, path, token string, form url.Values) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, string(b))
	u.mu.Unlock()
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// checkNoSecret fails the test when secret shows in a log line or a
// response body of u.
func (u *testUI) checkNoSecret(t *testing.T, secret string) {
	t.Helper()
	if strings.Contains(u.logs.String(), secret) {
		t.Errorf("the token is in the logs")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, b := range u.bodies {
		if strings.Contains(b, secret) {
			t.Errorf("the token is in a response: %.200s", b)
		}
	}
}

// serviceAccount creates a ServiceAccount and returns a token of it (the
// TokenRequest API) and its user name.
func serviceAccount(t *testing.T, ns, name string) (token, user string) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token, "system:serviceaccount:" + ns + ":" + name
}

// grant lets the ServiceAccount saNS/sa verb ManifestSyncs in ns.
func grant(t *testing.T, ns, saNS, sa string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	name := sa + "-" + strings.Join(verbs, "-")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"manifestsync.dev"}, Resources: []string{"manifestsyncs"}, Verbs: verbs},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: saNS, Name: sa}}}
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
}

// createSync creates a ManifestSync of a GitHub source with a status that
// says it is Ready and Healthy with one history entry.
func createSync(t *testing.T, ns, name string) *v1alpha1.ManifestSync {
	t.Helper()
	ctx := context.Background()
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://github.com/example/apps.git", Ref: v1alpha1.GitRef{Branch: "main"}}},
		}, Targets: []v1alpha1.Target{{Name: "app", Namespace: ns}}},
	}
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	commit := "4f2c0a1b2c3d4e5f60718293a4b5c6d7e8f90123"
	ms.Status = v1alpha1.ManifestSyncStatus{
		ObservedGeneration: ms.Generation,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced, Message: "Applied 1 object",
				ObservedGeneration: ms.Generation, LastTransitionTime: now},
			{Type: v1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, Reason: "Current", Message: "All objects are Current",
				ObservedGeneration: ms.Generation, LastTransitionTime: now},
		},
		LastAppliedRevision: "sha256:0123456789abcdef0123456789abcdef",
		Inputs:              &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + commit}},
		Targets:             []v1alpha1.TargetStatus{{Name: "app", Namespace: ns, State: v1alpha1.TargetSynced, Objects: 1, Health: v1alpha1.HealthHealthy}},
		Inventory:           []v1alpha1.InventoryEntry{{ID: ns + "_cfg__ConfigMap", Version: "v1", Target: "app/" + ns}},
		History: []v1alpha1.HistoryEntry{{Revision: "sha256:0123456789abcdef0123456789abcdef", Time: now, Result: "Synced",
			Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + commit}}}},
		LastSuccessfulSyncTime: &now,
	}
	if err := env.Client.Status().Update(ctx, ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// rowPattern finds the overview's rows.
var rowPattern = regexp.MustCompile(`<tr data-ms="([^"]+)"`)

// rows are the "namespace/name" of the overview's rows.
func rows(body string) []string {
	var out []string
	for _, m := range rowPattern.FindAllStringSubmatch(body, -1) {
		out = append(out, html.UnescapeString(m[1]))
	}
	return out
}

// flashPattern finds #flash and its role.
var flashPattern = regexp.MustCompile(`<div id="flash" role="(\w+)" class="[^"]*">([^<]*)</div>`)

// flashOf is the role and text of the page's #flash; "" when it has none.
func flashOf(body string) (role, text string) {
	m := flashPattern.FindStringSubmatch(body)
	if m == nil {
		return "", ""
	}
	return m[1], html.UnescapeString(m[2])
}

var errorPattern = regexp.MustCompile(`<p id="error" role="alert"[^>]*>([^<]*)</p>`)

// errorOf is the text of the page's #error; "" when it has none.
func errorOf(body string) string {
	m := errorPattern.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// sseEvent is one server-sent event.
type sseEvent struct {
	event, data string
	at          time.Time
}

// openStream opens /stream with token and sends its events on the
// channel until the test ends.
func (u *testUI) openStream(t *testing.T, token string) <-chan sseEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.URL+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // the reader below closes it
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /stream: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET /stream: Content-Type %q", ct)
	}
	ch := make(chan sseEvent, 100)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					ev.at = time.Now()
					select {
					case ch <- ev:
					default:
					}
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch
}
