package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// A remote cluster is whatever its kubeconfig names: possibly a server
// that accepts connections and never answers, or an internal HTTP service
// that is no Kubernetes API server at all. Two things keep such a peer
// from holding the operator or leaking through it:
//
//   - reachability: every request has a deadline (the client's
//     RemoteTimeout), a first contact is a short probe before any other
//     request, and once a request fails for want of an answer the cluster
//     is "down": every request to it fails at once, without a connection,
//     with "unreachable (retrying)", so that its ManifestSyncs yield
//     their workers; one background probe per cluster, backing off to
//     probeBackoffMax, finds it back and wakes the ManifestSyncs that use
//     it.
//   - withheld bodies: an answer that is not the API's own (an error whose
//     body is not a Kubernetes Status, or a success that is no Kubernetes
//     object) reaches client-go as a fixed text naming the status code, so
//     that no status, event or log of a tenant shows what the peer sent.

const (
	// contactTimeout bounds a first contact's probe (and every background
	// probe), below RemoteTimeout when that is shorter.
	contactTimeout = 3 * time.Second
	// probeBackoffMin and probeBackoffMax bound the interval of the
	// background probes of a cluster that is down.
	probeBackoffMin = time.Second
	probeBackoffMax = 30 * time.Second
	// maxWithheldBody is how much of an error body is read to tell
	// whether it is a Kubernetes Status.
	maxWithheldBody = 1 << 20
)

// unreachableError fails every request to a cluster that is down.
type unreachableError struct{ why string }

func (e *unreachableError) Error() string { return "unreachable (retrying): " + e.why }

// reachability is whether one remote cluster answers, as its requests and
// probes found.
type reachability struct {
	// probe asks the cluster once, bypassing the gate; nil when it
	// answered at all (whatever its status code).
	probe   func(ctx context.Context) error
	timeout time.Duration // of a probe
	// wake enqueues the ManifestSyncs that use the cluster, once it
	// answers again; needed tells whether any still does.
	wake   func()
	needed func() bool
	log    logr.Logger
	ctx    context.Context // the probes stop with it

	mu      sync.Mutex
	down    *unreachableError // nil while the cluster answers
	probing bool
}

// err is the error of every request while the cluster is down, else nil.
func (r *reachability) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down == nil {
		return nil
	}
	if !r.probing {
		r.probing = true
		go r.run()
	}
	return r.down
}

// fail records that a request, of the timeout given, got no answer: the
// cluster is down until a probe finds it back.
func (r *reachability) fail(err error, timeout time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down != nil {
		return
	}
	r.down = &unreachableError{why: noAnswer(err, timeout)}
	r.log.Info("remote cluster unreachable; its targets and sources fail at once until a probe finds it back", "reason", r.down.why)
	if !r.probing {
		r.probing = true
		go r.run()
	}
}

// contact probes the cluster once, as a first contact does.
func (r *reachability) contact(ctx context.Context) error {
	if err := r.probeOnce(ctx); err != nil {
		r.fail(err, r.timeout)
		return r.err()
	}
	return nil
}

func (r *reachability) probeOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.probe(ctx)
}

// run probes the cluster, backing off, until it answers (then wakes its
// ManifestSyncs), nothing uses it any more, or the probes stop.
func (r *reachability) run() {
	defer func() {
		r.mu.Lock()
		r.probing = false
		r.mu.Unlock()
	}()
	backoff := probeBackoffMin
	for {
		timer := time.NewTimer(backoff)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if r.needed != nil && !r.needed() {
			return // the next user starts the probes again
		}
		if err := r.probeOnce(r.ctx); err == nil {
			r.mu.Lock()
			r.down = nil
			r.mu.Unlock()
			r.log.Info("remote cluster answers again")
			if r.wake != nil {
				r.wake()
			}
			return
		}
		backoff = min(2*backoff, probeBackoffMax)
	}
}

// noAnswer says why a request got no answer, without anything the peer
// sent.
func noAnswer(err error, timeout time.Duration) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("no answer within %v", timeout)
	}
	return err.Error() // the request and the network's error: nothing of the peer's
}

// remoteTransport is the transport of every request to a remote cluster:
// it fails requests at once while the cluster is down (reach; nil for the
// probes themselves), marks it down when a request gets no answer, and
// withholds what the peer answered that is not the API's own.
type remoteTransport struct {
	next    http.RoundTripper
	reach   *reachability
	timeout time.Duration // of a request, for messages
}

func (t *remoteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.reach != nil {
		if err := t.reach.err(); err != nil {
			return nil, err
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if t.reach != nil && !errors.Is(err, context.Canceled) {
			t.reach.fail(err, t.timeout)
		}
		return nil, err
	}
	return withholdBody(req, resp)
}

// CancelRequest cancels req as the transport it wraps does (client-go's
// wrappers call it when a request times out).
func (t *remoteTransport) CancelRequest(req *http.Request) {
	if c, ok := t.next.(interface{ CancelRequest(*http.Request) }); ok {
		c.CancelRequest(req)
	}
}

// WrappedRoundTripper is the transport t wraps.
func (t *remoteTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// withholdBody replaces what resp carries by a fixed text naming its
// status code, when it is not the API's own: an error whose body is not a
// Kubernetes Status, or a success (but a watch's stream, or a few paths
// that answer no object) whose JSON body is no Kubernetes object.
func withholdBody(req *http.Request, resp *http.Response) (*http.Response, error) {
	failed := resp.StatusCode >= http.StatusBadRequest
	ctype := resp.Header.Get("Content-Type")
	isJSON := ctype == "" || strings.Contains(ctype, "json")
	if !failed && (!isJSON || streams(req) || answersNoObject(req.URL.Path)) {
		return resp, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWithheldBody))
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s %s: %w", req.Method, req.URL.Path, err)
	}
	kind := kindOf(body)
	switch {
	case failed && kind == "Status" && isJSON, !failed && kind != "":
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	code := resp.StatusCode
	if !failed {
		code = http.StatusBadGateway // a success that is no object
	}
	// Plain text: client-go makes of it, whatever it reads, "an error on
	// the server (<this>)" with the code's reason.
	text := []byte(fmt.Sprintf("the server answered %d %s with a body that is not a Kubernetes API status (withheld)",
		resp.StatusCode, http.StatusText(resp.StatusCode)))
	resp.StatusCode, resp.Status = code, strconv.Itoa(code)+" "+http.StatusText(code)
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp.Header.Del("Content-Encoding")
	resp.Header.Set("Content-Length", strconv.Itoa(len(text)))
	resp.ContentLength = int64(len(text))
	resp.Body = io.NopCloser(bytes.NewReader(text))
	return resp, nil
}

// kindOf is the "kind" of a JSON object, "" for anything else.
func kindOf(body []byte) string {
	var obj struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(body, &obj) != nil {
		return ""
	}
	return obj.Kind
}

// streams reports whether req is a watch, whose answer is a stream.
func streams(req *http.Request) bool {
	w := req.URL.Query().Get("watch")
	return w == "true" || w == "1" || strings.Contains(req.URL.Path, "/watch/")
}

// answersNoObject reports whether the API server answers path with
// something else than a Kubernetes object (its version, OpenAPI, health).
func answersNoObject(path string) bool {
	for _, p := range []string{"/version", "/openapi/", "/readyz", "/healthz", "/livez", "/.well-known/"} {
		if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// newReachability is the reachability of the cluster cfg reaches; cfg
// (the kubeconfig's, with its timeout) is not changed.
func newReachability(ctx context.Context, cfg *rest.Config, timeout time.Duration, log logr.Logger) (*reachability, error) {
	pc := rest.CopyConfig(cfg)
	pc.Timeout = timeout
	pc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &remoteTransport{next: rt} })
	dc, err := discovery.NewDiscoveryClientForConfig(pc)
	if err != nil {
		return nil, fmt.Errorf("the probe: %w", err)
	}
	rc := dc.RESTClient()
	return &reachability{
		timeout: timeout, log: log, ctx: ctx,
		probe: func(ctx context.Context) error {
			var code int
			err := rc.Get().AbsPath("/readyz").MaxRetries(0).Do(ctx).StatusCode(&code).Error()
			if code != 0 {
				return nil // it answers; what, its requests will say
			}
			return err
		},
	}, nil
}
