package controller

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// What a peer answers reaches client-go only when it is the API's own: a
// Status (an API server's 403 names the user and verb: kept), an object,
// or a watch's stream; anything else becomes a fixed text with the status
// code. What a hostile "cluster" (an internal HTTP service) gets through:
// its status code, nothing of its body.
func TestWithholdBody(t *testing.T) {
	const marker = "internal-page-marker"
	status := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps is forbidden: User \"u\" cannot list","reason":"Forbidden","code":403}`
	for _, c := range []struct {
		name, url, ctype, body string
		code                   int
		kept                   bool
		wantCode               int
	}{
		{"an API server's Status", "/api/v1/configmaps", "application/json", status, 403, true, 403},
		{"an HTML error page", "/api/v1/namespaces/x", "text/html", "<h1>" + marker + "</h1>", 500, false, 500},
		{"a text error", "/api", "text/plain", marker, 502, false, 502},
		{"a JSON error that is no Status", "/api", "application/json", `{"error": "` + marker + `"}`, 404, false, 404},
		{"a success that is no object", "/api/v1/namespaces/x", "application/json", `{"secret": "` + marker + `"}`, 200, false, 502},
		{"an object", "/api/v1/namespaces/x", "application/json", `{"kind": "Namespace", "metadata": {"name": "` + marker + `"}}`, 200, true, 200},
		{"a watch's stream", "/api/v1/configmaps?watch=true", "application/json", `{"type": "ADDED"` + marker, 200, true, 200},
		{"a probe's answer", "/readyz", "text/plain", "ok " + marker, 200, true, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, c.url, nil)
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", c.ctype)
			rec.WriteHeader(c.code)
			_, _ = rec.WriteString(c.body)
			resp, err := withholdBody(req, rec.Result())
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(raw) == c.body; got != c.kept {
				t.Errorf("body kept: %v, want %v; body %q", got, c.kept, raw)
			}
			if !c.kept && (strings.Contains(string(raw), marker) || !strings.Contains(string(raw), "withheld")) {
				t.Errorf("withheld body %q", raw)
			}
			if resp.StatusCode != c.wantCode {
				t.Errorf("code %d, want %d", resp.StatusCode, c.wantCode)
			}
		})
	}
}

// countingTransport counts the requests that reach the network, and fails
// them as a peer that never answers does.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	c.n.Add(1)
	return nil, context.DeadlineExceeded
}

// A cluster whose request got no answer is down: its next requests fail
// at once, without reaching the network, saying "unreachable (retrying)";
// one background probe finds it back and wakes the ManifestSyncs that use
// it, and requests go through again. What a tenant whose cluster is a
// blackhole costs the operator: one request's timeout, then a probe every
// 1 s backing off to 30 s, and no worker.
func TestUnreachableClusterFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var answers atomic.Bool
	woken := make(chan struct{}, 1)
	reach := &reachability{
		timeout: time.Second, log: logr.Discard(), ctx: ctx,
		probe: func(context.Context) error {
			if answers.Load() {
				return nil
			}
			return context.DeadlineExceeded
		},
		wake: func() { woken <- struct{}{} },
	}
	network := &countingTransport{}
	rt := &remoteTransport{next: network, reach: reach, timeout: 10 * time.Second}
	req := httptest.NewRequest(http.MethodGet, "https://peer/api", nil)
	if _, err := rt.RoundTrip(req); err == nil {
		t.Fatal("a request without an answer succeeded")
	}
	start := time.Now()
	for range 100 {
		_, err := rt.RoundTrip(req)
		var down *unreachableError
		if !errors.As(err, &down) || !strings.Contains(err.Error(), "unreachable (retrying): no answer within 10s") {
			t.Fatalf("a request to the cluster down: %v", err)
		}
	}
	if took := time.Since(start); took > time.Second || network.n.Load() != 1 {
		t.Errorf("100 requests to the cluster down took %v and %d reached the network; want at once, none", took, network.n.Load()-1)
	}
	answers.Store(true)
	select {
	case <-woken:
	case <-time.After(timeout):
		t.Fatal("the cluster answering again woke nothing")
	}
	if _, err := rt.RoundTrip(req); network.n.Load() != 2 {
		t.Errorf("a request once the cluster answers: %v, %d reached the network", err, network.n.Load())
	}
}
