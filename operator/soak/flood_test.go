package soak

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// floodRSSLimit is issue 25's bound on the operator's memory under a
// webhook flood.
const floodRSSLimit = 150 << 20

// TestWebhookFlood: 400 concurrent unauthenticated posts of 5 MiB each,
// from ten source addresses, at `engine operator`'s webhook receiver (a
// process of its own) leave it under 150 MiB of RSS (its peak, VmHWM) and
// make no API request (counted by a proxy between the operator and its
// API server); signed pushes during and after the flood are still
// accepted and synced. What a hostile caller gets: 404, 401, 413, 429 or
// 503, at once, without its body read.
//
// It runs against the second control plane, in which no test makes
// ManifestSyncs, so that no other test's objects reach this operator.
func TestWebhookFlood(t *testing.T) {
	if remoteEnv == nil {
		t.Skip("needs the control planes and the engine; skipped under -short")
	}
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	ctx := context.Background()
	c := remoteEnv.Client
	home, target := "flood-home", "flood-target"
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: home}},
		{ObjectMeta: metav1.ObjectMeta{Name: target, Annotations: map[string]string{allowFrom: home}}},
	} {
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	token := []byte("flood-hook-s3cret")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "hook"}, Data: map[string][]byte{webhook.SecretKey: token}}); err != nil {
		t.Fatal(err)
	}
	git, err := newGitServer(t)
	if err != nil {
		t.Fatal(err)
	}
	version := 1
	manifest := func() map[string]string {
		return map[string]string{"web.yaml": fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {version: %q}\n", strconv.Itoa(version))}
	}
	if err := git.commit(manifest()); err != nil {
		t.Fatal(err)
	}

	proxy := startAPIProxy(t, remoteEnv.Config)
	op := startFloodOperator(t, proxy.url) // stopped after the ManifestSync is finalized

	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "web", Annotations: map[string]string{webhook.SecretAnnotation: "hook"}},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources:  []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: git.url(), Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets:  []v1alpha1.Target{{Name: "t", Namespace: target}},
			Interval: &metav1.Duration{Duration: time.Hour}, // only a webhook call brings a commit
		},
	}
	remoteEnv.CreateSync(t, ms, time.Minute)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, time.Minute)
	hookURL := op.webhookURL + webhook.PathPrefix + home + "/web"

	// push commits the next version, posts a signed push from 127.0.0.1
	// (retrying on 429 and 503, as a Git server's redelivery would) and
	// returns how long the call took to be accepted and the commit to be
	// applied.
	push := func() (accepted, applied time.Duration) {
		t.Helper()
		version++
		if err := git.commit(manifest()); err != nil {
			t.Fatal(err)
		}
		payload := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":"v%d"}`, version)
		start := time.Now()
		for {
			code, err := postFrom("127.0.0.1", hookURL, bytes.NewReader(payload), int64(len(payload)), map[string]string{
				"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hex.EncodeToString(webhook.Sign(payload, token)),
			})
			if err == nil && code == http.StatusAccepted {
				break
			}
			if (err != nil || (code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable)) || time.Since(start) > time.Minute {
				t.Fatalf("a signed push: status %d, %v", code, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		accepted = time.Since(start)
		want := strconv.Itoa(version)
		testenv.Eventually(t, time.Minute, func() error {
			cm := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: target, Name: "web"}, cm); err != nil {
				return err
			}
			if cm.Data["version"] != want {
				return fmt.Errorf("version %q, want %q", cm.Data["version"], want)
			}
			return nil
		})
		return accepted, time.Since(start)
	}
	// The receiver has served a push before the flood: the flood finds
	// its Secret's token cached, as it would in a running operator.
	_, first := push()
	t.Logf("a signed push applied its commit in %v", first.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the reconciles the push caused end

	before := op.memory(t)
	mark := proxy.mark()
	codes, took := flood(t, hookURL)
	time.Sleep(time.Second) // whatever the flood caused reaches the API server
	reqs := proxy.since(mark)
	after := op.memory(t)
	t.Logf("400 unauthenticated posts of 5 MiB answered in %v: %v", took.Round(time.Millisecond), codes)
	t.Logf("operator RSS: %d MiB before the flood, %d MiB after, peak (VmHWM) %d MiB", before.rss>>20, after.rss>>20, after.hwm>>20)
	if after.hwm >= floodRSSLimit {
		t.Errorf("the operator's peak RSS is %d MiB, want under %d MiB", after.hwm>>20, floodRSSLimit>>20)
	}
	var caused []string
	for _, r := range reqs {
		if r.path != "/readyz" && r.watch == "" {
			caused = append(caused, r.method+" "+r.path)
		}
	}
	if len(caused) > 0 {
		t.Errorf("the flood made %d API requests (%d of them for Secrets), want none: %.600s", len(caused), countWith(caused, "/secrets"), strings.Join(caused, ", "))
	}
	if codes[http.StatusAccepted] > 0 {
		t.Errorf("%d unauthenticated posts were accepted", codes[http.StatusAccepted])
	}

	// During a second flood, and right after it, signed pushes are still
	// accepted and synced.
	var during struct{ accepted, applied time.Duration }
	done := make(chan struct{})
	go func() {
		defer close(done)
		flood(t, hookURL)
	}()
	time.Sleep(50 * time.Millisecond)
	during.accepted, during.applied = push()
	<-done
	acceptedAfter, appliedAfter := push()
	t.Logf("a signed push during a flood: accepted in %v, applied in %v; right after it: accepted in %v, applied in %v",
		during.accepted.Round(time.Millisecond), during.applied.Round(time.Millisecond), acceptedAfter.Round(time.Millisecond), appliedAfter.Round(time.Millisecond))
	if hwm := op.memory(t).hwm; hwm >= floodRSSLimit {
		t.Errorf("after two floods the operator's peak RSS is %d MiB, want under %d MiB", hwm>>20, floodRSSLimit>>20)
	}

	// The token is cached by the Secret's resourceVersion: once the
	// Secret is rotated, the new token is accepted (as soon as the watch
	// shows the change) and the old one refused.
	rotated := []byte("flood-hook-rotated")
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: home, Name: "hook"}, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data[webhook.SecretKey] = rotated
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"ref":"refs/heads/main","after":"rotated"}`)
	signed := func(tok []byte) func() error {
		return func() error {
			code, err := postFrom("127.0.0.1", hookURL, bytes.NewReader(payload), int64(len(payload)), map[string]string{
				"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + hex.EncodeToString(webhook.Sign(payload, tok)),
			})
			if err != nil {
				return err
			}
			if code != http.StatusAccepted {
				return fmt.Errorf("status %d", code)
			}
			return nil
		}
	}
	testenv.Eventually(t, time.Minute, signed(rotated))
	if err := signed(token)(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a push signed with the token rotated out: %v, want status 401", err)
	}
	if t.Failed() {
		t.Logf("the operator's log: %s", op.logPath)
	}
}

func countWith(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// flood posts 400 bodies of 5 MiB at once, 40 from each of ten source
// addresses (127.0.0.2 to 127.0.0.11), to url, a route that exists, and
// to one that does not: without a signature, with a wrong one and an
// announced length, with a wrong one and none (chunked). It returns the
// statuses ("error" when the receiver closed the connection before the
// client read its answer) and how long the flood took.
func flood(t *testing.T, hookURL string) (map[int]int, time.Duration) {
	const posts, sources, size = 400, 10, 5 << 20
	blob := make([]byte, size)
	wrong := map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("0f", 32), "X-GitHub-Event": "push"}
	unknown := hookURL[:strings.LastIndex(hookURL, "/")] + "/nope"
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range posts {
		wg.Go(func() {
			from := fmt.Sprintf("127.0.0.%d", 2+i%sources)
			var code int
			var err error
			switch i % 4 {
			case 0:
				code, err = postFrom(from, unknown, bytes.NewReader(blob), size, wrong)
			case 1:
				code, err = postFrom(from, hookURL, bytes.NewReader(blob), size, nil)
			case 2:
				code, err = postFrom(from, hookURL, bytes.NewReader(blob), size, wrong)
			case 3:
				code, err = postFrom(from, hookURL, io.LimitReader(bytes.NewReader(blob), size), -1, wrong)
			}
			if err != nil {
				code = -1
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes, time.Since(start)
}

// postFrom posts body from the source address from (any of 127.0.0.0/8)
// on a connection of its own, and returns the status.
func postFrom(from, url string, body io.Reader, length int64, headers map[string]string) (int, error) {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return 0, err
	}
	req.ContentLength = length
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// floodOperator is `engine operator` with its webhook receiver, its API
// requests through the proxy.
type floodOperator struct {
	*operatorProc
	webhookURL string
}

func startFloodOperator(t *testing.T, apiURL string) *floodOperator {
	t.Helper()
	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: apiURL}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	op := &floodOperator{
		operatorProc: &operatorProc{
			bin: engineBin, kubeconfig: kcPath, logPath: filepath.Join(dir, "operator.log"),
			env:  []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_CACHE_HOME=" + filepath.Join(dir, "cache")},
			args: []string{"--webhook-bind-address", addr},
		},
		webhookURL: "http://" + addr,
	}
	if err := op.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.stop)
	// Ready once the receiver answers (404 for a route that is none).
	testenv.Eventually(t, time.Minute, func() error {
		resp, err := http.Post(op.webhookURL+"/hooks/x/y", "text/plain", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	return op
}

type memory struct{ rss, hwm int64 }

// memory reads the operator process's RSS and its peak from
// /proc/PID/status (its evaluation workers are processes of their own:
// the receiver runs in this one).
func (o *operatorProc) memory(t *testing.T) memory {
	t.Helper()
	o.mu.Lock()
	pid := o.cmd.Process.Pid
	o.mu.Unlock()
	m, err := readMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// readMemory reads VmRSS and VmHWM of a process.
func readMemory(pid int) (memory, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	for line := range strings.SplitSeq(string(raw), "\n") {
		name, value, _ := strings.Cut(line, ":")
		kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			m.rss = kib << 10
		case "VmHWM":
			m.hwm = kib << 10
		}
	}
	if m.hwm == 0 {
		return m, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return m, nil
}

// apiProxy is a plain-HTTP proxy to an API server, with the credentials
// of cfg, that records every request it forwards: what a process that
// reaches the API server through it asks, counted outside that process.
type apiProxy struct {
	url string

	mu   sync.Mutex
	reqs []proxied
}

type proxied struct {
	method, path, watch string
}

func startAPIProxy(t *testing.T, cfg *rest.Config) *apiProxy {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     rt,
		FlushInterval: -1, // watches stream
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.reqs = append(p.reqs, proxied{r.Method, r.URL.Path, r.URL.Query().Get("watch")})
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	p.url = srv.URL
	return p
}

// mark is where the requests made from now on begin.
func (p *apiProxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// since are the requests made after mark.
func (p *apiProxy) since(mark int) []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxied(nil), p.reqs[mark:]...)
}
