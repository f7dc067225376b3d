package webhook

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// The receiver's own decisions, before anything reaches an API server:
// the ManifestSyncs come from a fake client standing in for the manager's
// cache, the Secrets from a counting reader. The operator's whole path,
// against a real API server, is operator/soak's TestWebhookFlood.

const testToken = "hook-s3cret-value"

// countingSecrets serves one Secret and counts its reads.
type countingSecrets struct {
	reads atomic.Int32
	token string
}

func (s *countingSecrets) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s.reads.Add(1)
	if key.Name != "hook" {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	obj.(*corev1.Secret).Data = map[string][]byte{SecretKey: []byte(s.token)}
	return nil
}

func (s *countingSecrets) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return ErrOnlySecrets
}

// logLines collects a receiver's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// newTestReceiver has ManifestSyncs team/web (opted in, Secret "hook"),
// team/plain (not opted in) and team/lost (naming a Secret that does not
// exist).
func newTestReceiver(t *testing.T) (*Receiver, *countingSecrets, *logLines) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ms := func(name string, annotations map[string]string) client.Object {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Annotations: annotations}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		ms("web", map[string]string{SecretAnnotation: "hook"}),
		ms("plain", nil),
		ms("lost", map[string]string{SecretAnnotation: "gone"}),
	).Build()
	secrets := &countingSecrets{token: testToken}
	logs := &logLines{}
	rc := &Receiver{Client: c, Secrets: secrets, Log: funcr.New(logs.add, funcr.Options{Verbosity: 1})}
	return rc, secrets, logs
}

// body is a request body that records whether, and how much of it, the
// receiver read.
type body struct {
	r    io.Reader
	read atomic.Int64
}

func newBody(n int) *body { return &body{r: io.LimitReader(zeros{}, int64(n))} }

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// call serves one request from remote and returns the response.
func call(rc *Receiver, path string, b io.Reader, length int64, headers map[string]string, remote string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, b)
	req.ContentLength = length
	req.RemoteAddr = remote
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	rc.ServeHTTP(w, req)
	return w
}

// A caller who cannot prove it knows the secret is refused before the
// receiver reads a byte of its 5 MiB body, and (but for a wrong
// signature, which needs the token) before it reads a Secret; the
// responses and the log hold neither the token nor the body.
func TestReceiverRefusesBeforeReading(t *testing.T) {
	const big = 5 << 20
	wrongSig := map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("ab", 32)}
	for _, tc := range []struct {
		name      string
		path      string
		length    int64
		headers   map[string]string
		status    int
		maxRead   int64 // of the body
		readsSecr bool
	}{
		{"unknown ManifestSync", "/hooks/team/nope", big, wrongSig, http.StatusNotFound, 0, false},
		{"unknown namespace", "/hooks/other/web", big, wrongSig, http.StatusNotFound, 0, false},
		{"not opted in", "/hooks/team/plain", big, wrongSig, http.StatusNotFound, 0, false},
		{"no signature", "/hooks/team/web", big, nil, http.StatusUnauthorized, 0, false},
		{"announced too large", "/hooks/team/web", big, wrongSig, http.StatusRequestEntityTooLarge, 0, false},
		{"wrong GitLab token", "/hooks/team/web", big, map[string]string{"X-Gitlab-Token": "guess"}, http.StatusRequestEntityTooLarge, 0, false},
		{"wrong GitLab token, small", "/hooks/team/web", 100, map[string]string{"X-Gitlab-Token": "guess"}, http.StatusUnauthorized, 0, true},
		// Chunked: no length announced; reading stops at the limit.
		{"unannounced too large", "/hooks/team/web", -1, wrongSig, http.StatusRequestEntityTooLarge, DefaultMaxBody + 64<<10, true},
		{"wrong signature", "/hooks/team/web", 100, wrongSig, http.StatusUnauthorized, 100, true},
		{"secret missing", "/hooks/team/lost", 100, wrongSig, http.StatusInternalServerError, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, secrets, logs := newTestReceiver(t)
			n := big
			if tc.length >= 0 {
				n = int(tc.length)
			}
			b := newBody(n)
			w := call(rc, tc.path, b, tc.length, tc.headers, "192.0.2.1:4000")
			if w.Code != tc.status {
				t.Errorf("status %d, want %d (%s)", w.Code, tc.status, strings.TrimSpace(w.Body.String()))
			}
			if got := b.read.Load(); got > tc.maxRead {
				t.Errorf("read %d bytes of the body, want at most %d", got, tc.maxRead)
			}
			if got := secrets.reads.Load(); (got > 0) != tc.readsSecr {
				t.Errorf("read the Secret %d times, want reads: %v", got, tc.readsSecr)
			}
			if out := w.Body.String() + logs.all(); strings.Contains(out, testToken) {
				t.Errorf("the response or the log holds the token: %s", out)
			}
		})
	}
}

// Signed calls, GitHub's, Gitea's and GitLab's, are accepted and set the
// annotation; the ref and commit of the payload are logged, not the
// payload, and never the token.
func TestReceiverAcceptsSignedCalls(t *testing.T) {
	payload := `{"ref":"refs/heads/main","before":"0000","after":"abc123","commits":[{"message":"` + strings.Repeat("x", 200<<10) + `"}]}`
	sig := hex.EncodeToString(Sign([]byte(payload), []byte(testToken)))
	for name, h := range map[string]map[string]string{
		"github": {"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + sig},
		"gitea":  {"X-Gitea-Event": "push", "X-Gitea-Signature": sig},
		"gitlab": {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": testToken},
	} {
		t.Run(name, func(t *testing.T) {
			rc, _, logs := newTestReceiver(t)
			w := call(rc, "/hooks/team/web", strings.NewReader(payload), int64(len(payload)), h, "192.0.2.1:4000")
			if w.Code != http.StatusAccepted {
				t.Fatalf("status %d, want 202: %s", w.Code, w.Body.String())
			}
			ms := &v1alpha1.ManifestSync{}
			if err := rc.Client.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "web"}, ms); err != nil {
				t.Fatal(err)
			}
			if ms.Annotations[RequestedAtAnnotation] == "" {
				t.Error("the call set no requested-at annotation")
			}
			out := logs.all()
			if !strings.Contains(out, "refs/heads/main") || !strings.Contains(out, "abc123") {
				t.Errorf("the log does not name the ref and commit: %s", out)
			}
			if strings.Contains(out, testToken) || strings.Contains(out, "xxxxxxxx") {
				t.Errorf("the log holds the token or the payload: %.300s", out)
			}
		})
	}
}

// A source over its rate gets 429 and, when every slot is taken, any
// other gets 503: at once, without a byte of the body read, while the
// calls that hold the slots wait for their bodies.
func TestReceiverLimitsCalls(t *testing.T) {
	rc, _, _ := newTestReceiver(t)
	rc.MaxInFlight = 2
	rc.PerSource = SourceLimits{Rate: 0.001, Burst: 3, InFlight: 1}
	sig := map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("ab", 32)}

	// Two calls, from two sources, hold both slots: their bodies never
	// end until the test lets them.
	var held []*io.PipeWriter
	var wg sync.WaitGroup
	for i := range 2 {
		pr, pw := io.Pipe()
		held = append(held, pw)
		wg.Go(func() {
			call(rc, "/hooks/team/web", pr, -1, sig, fmt.Sprintf("192.0.2.%d:4000", 10+i))
		})
	}
	defer func() {
		for _, pw := range held {
			pw.Close()
		}
		wg.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(rc.slots) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two held calls took no slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	b := newBody(5 << 20)
	if w := call(rc, "/hooks/team/web", b, 5<<20, sig, "192.0.2.20:4000"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a call while every slot is taken: status %d, want 503", w.Code)
	}
	// The first held source has a call in flight already.
	if w := call(rc, "/hooks/team/web", b, 5<<20, sig, "192.0.2.10:4001"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a second call at once from one source: status %d, want 429", w.Code)
	}
	if b.read.Load() != 0 {
		t.Errorf("refused calls read %d bytes of their body", b.read.Load())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("refusing took %v: it waited", took)
	}

	// A source's burst, then 429, counted in the metric (refusals are
	// not logged by default).
	refused := testutil.ToFloat64(requestsTotal.WithLabelValues("429"))
	rc2, _, _ := newTestReceiver(t)
	rc2.PerSource = SourceLimits{Rate: 0.001, Burst: 3}
	var codes []int
	for range 5 {
		codes = append(codes, call(rc2, "/hooks/team/nope", newBody(10), 10, nil, "192.0.2.30:4000").Code)
	}
	if want := []int{404, 404, 404, 429, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("five calls from one source with a burst of 3: %v, want %v", codes, want)
	}
	if got := testutil.ToFloat64(requestsTotal.WithLabelValues("429")) - refused; got != 2 {
		t.Errorf("manifestsync_webhook_requests_total{code=\"429\"} grew by %v, want 2", got)
	}
	if w := call(rc2, "/hooks/team/nope", newBody(10), 10, nil, "192.0.2.31:4000"); w.Code != http.StatusNotFound {
		t.Errorf("another source: status %d, want 404", w.Code)
	}
}

// Calls from many addresses do not grow the table of sources beyond its
// bound; an IPv6 host's /64 is one source.
func TestPeersBounded(t *testing.T) {
	ps := newPeers(SourceLimits{Tracked: 8})
	for i := range 1000 {
		p, ok := ps.admit(sourceOf(fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)))
		if !ok {
			t.Fatalf("call %d refused", i)
		}
		ps.done(p)
	}
	if n := ps.len(); n > 8 {
		t.Errorf("%d sources remembered, want at most 8", n)
	}
	for addr, want := range map[string]string{
		"[2001:db8:1:2:aaaa::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":      "192.0.2.7",
		"192.0.2.7:80":               "192.0.2.7",
	} {
		if got := sourceOf(addr); got != want {
			t.Errorf("sourceOf(%s) = %s, want %s", addr, got, want)
		}
	}
}

// A client that sends its headers slowly (slow loris) or opens a
// connection and sends nothing is cut off after ReadHeaderTimeout.
func TestServerClosesSlowClients(t *testing.T) {
	rc, _, _ := newTestReceiver(t)
	srv := NewServer("127.0.0.1:0", rc)
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var addr string
	select {
	case a := <-srv.Listening():
		addr = a.String()
	case err := <-done:
		t.Fatal(err)
	}
	for name, send := range map[string]string{
		"silent":         "",
		"partial header": "POST /hooks/team/web HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha",
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := io.WriteString(conn, send); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = bufio.NewReader(conn).ReadString('\n')
		// The server closes it (EOF, or a 408 it may write first); a
		// read deadline of ours would mean it held the connection.
		var ne net.Error
		if errorsAs(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the connection was held for 30 s", name)
		} else if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: closed after %v, want about 300ms", name, took)
		}
		conn.Close()
	}
}

// errorsAs is errors.As, for an interface target.
func errorsAs(err error, target *net.Error) bool {
	ne, ok := err.(net.Error)
	if ok {
		*target = ne
	}
	return ok
}

// The SecretCache reads a Secret once per resourceVersion, however many
// calls need it at once, and not at all when the watch does not know it.
func TestSecretCache(t *testing.T) {
	meta := &metaStub{rv: "1"}
	api := &countingSecrets{token: testToken}
	c := newSecretCache(meta, api)
	ctx := context.Background()
	get := func(name string) (string, error) {
		var s corev1.Secret
		err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: name}, &s)
		return string(s.Data[SecretKey]), err
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if tok, err := get("hook"); err != nil || tok != testToken {
				t.Errorf("get: %q, %v", tok, err)
			}
		})
	}
	wg.Wait()
	if n := api.reads.Load(); n != 1 {
		t.Errorf("50 calls at once read the Secret %d times, want 1", n)
	}
	meta.set("2") // rotated
	api.token = "rotated"
	if tok, _ := get("hook"); tok != "rotated" || api.reads.Load() != 2 {
		t.Errorf("after a new resourceVersion: token %q, %d reads; want the new token, 2 reads", tok, api.reads.Load())
	}
	if _, err := get("unknown"); !apierrors.IsNotFound(err) || api.reads.Load() != 2 {
		t.Errorf("a Secret the watch does not know: %v, %d reads; want NotFound and no read", err, api.reads.Load())
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "hook"}, &corev1.ConfigMap{}); err != ErrOnlySecrets {
		t.Errorf("a ConfigMap: %v", err)
	}
}

// metaStub is a watch's view of Secrets: "hook" exists at rv.
type metaStub struct {
	mu sync.Mutex
	rv string
}

func (m *metaStub) set(rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rv = rv
}

func (m *metaStub) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if key.Name != "hook" {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, key.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	obj.SetResourceVersion(m.rv)
	return nil
}

func (m *metaStub) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// keepIdentity drops what the watch must not hold: annotations
// (last-applied-configuration holds a Secret's data), labels, managed
// fields.
func TestKeepIdentity(t *testing.T) {
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: "hook", Namespace: "team", ResourceVersion: "7",
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"token":"czNjcmV0"}}`},
		Labels:        map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	out, err := keepIdentity(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Name != "hook" || m.Namespace != "team" || m.ResourceVersion != "7" || m.Annotations != nil || m.Labels != nil || m.ManagedFields != nil {
		t.Errorf("kept %+v", m.ObjectMeta)
	}
}
