// Package webhook receives the push notifications of Git servers and makes
// the ManifestSync they name fetch its sources at once, instead of at its
// next interval.
//
// A ManifestSync opts in with the annotation
//
//	manifestsync.dev/webhook-secret: <name of a Secret in its namespace>
//
// whose key "token" holds the shared secret, and the Git server is given
// the URL /hooks/<namespace>/<name>. A request is accepted only when it
// proves it knows the secret: GitHub's X-Hub-Signature-256
// ("sha256=<hex HMAC-SHA256 of the body>"), Gitea's (and Gogs')
// X-Gitea-Signature (the hex HMAC alone), or GitLab's X-Gitlab-Token (the
// secret itself). The receiver does not parse the payload to decide
// anything: any verified call triggers a fetch, which finds out itself
// whether a ref moved. The ref and commit of a push are only logged.
//
// The trigger is the annotation manifestsync.dev/requested-at, set to the
// time of the call: any replica of the operator can serve the webhook, and
// the leader reconciles the ManifestSync as soon as it sees the change.
// Users can set it the same way (kubectl annotate --overwrite).
//
// The server speaks plain HTTP; put it behind an Ingress or a proxy that
// terminates TLS. It must not import the controller.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

const (
	// SecretAnnotation on a ManifestSync names the Secret, in its
	// namespace, that holds the webhook's shared secret under SecretKey.
	SecretAnnotation = "manifestsync.dev/webhook-secret"
	SecretKey        = "token"
	// RequestedAtAnnotation is set to the time of each accepted call; its
	// change makes the operator reconcile the ManifestSync.
	RequestedAtAnnotation = "manifestsync.dev/requested-at"
	// PathPrefix is where the receiver serves: PathPrefix + "<ns>/<name>".
	PathPrefix = "/hooks/"
)

// Receiver is the HTTP handler of the webhooks.
//
// It decides as much as it can before it reads a byte of the body, so
// that callers who cannot prove they know a ManifestSync's secret cost it
// next to nothing: a caller over its rate gets 429 and, when MaxInFlight
// calls are being served, 503, both at once; the route is checked against
// the manager's cache (no API request): an unknown ManifestSync, or one
// that has not opted in, is 404; a call without any signature header is
// 401; one that announces a body over MaxBody is 413. Only then is the
// webhook Secret read (from Secrets: give it a SecretCache, so that no
// call makes an API request) and the body streamed through the HMAC,
// never buffered (its first pushPrefix bytes are kept, for the ref that
// is logged), and refused with 413 when it passes MaxBody. No response
// or log line holds a body, token or secret.
type Receiver struct {
	// Client reads ManifestSyncs (the manager's cached client: reads
	// make no API request) and sets RequestedAtAnnotation.
	Client client.Client
	// Syncs, when not nil, reads the ManifestSyncs instead of Client:
	// a replica of --shards auto, whose own cache holds its share only,
	// gives it a SyncCache, so that a call to any replica reaches every
	// ManifestSync (its owner sees the annotation change and syncs).
	Syncs client.Reader
	// Secrets reads the webhook Secrets: a *SecretCache in the operator.
	// Any reader works (the API server's, in tests), at the cost of an
	// API request per call that gets that far.
	Secrets client.Reader
	Log     logr.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Limits; zero values are the defaults (DefaultMaxBody and so on).
	MaxBody     int64
	MaxInFlight int
	// PerSource limits the calls of one source address (an IPv6 /64):
	// Rate a second, with bursts of Burst, and at most InFlight at once.
	PerSource SourceLimits

	once  sync.Once
	slots chan struct{}
	peers *peers
}

// Defaults of the Receiver's limits.
const (
	// DefaultMaxBody is 1 MiB, what a push event needs: GitLab sends at
	// most 20 commits in one, Bitbucket 5 (its payloads stay under 256
	// KB), and ingress-nginx, which the receiver usually sits behind,
	// refuses bodies over 1 MiB by default (proxy-body-size). GitHub caps
	// payloads at 25 MB, but only pushes that list thousands of commits
	// or files come near 1 MiB; those get 413, and the ManifestSync syncs
	// at its next interval (a webhook call only brings the fetch
	// forward). The body is streamed, not buffered: the limit bounds how
	// long a call holds a slot, not memory.
	DefaultMaxBody = 1 << 20
	// DefaultMaxInFlight calls are served at once; each holds about 40
	// KiB (a copy buffer and the payload's prefix).
	DefaultMaxInFlight = 32
	// pushPrefix is how much of a payload is kept to log its ref and
	// commit: GitHub, Gitea and GitLab put both within the first few
	// hundred bytes.
	pushPrefix = 4 << 10
)

// SourceLimits limit the calls of one source address.
type SourceLimits struct {
	Rate     float64 // calls a second; 0 is 10
	Burst    int     // 0 is 20
	InFlight int     // calls at once; 0 is 4
	// Tracked is how many addresses are remembered, least recently seen
	// dropped first, so that calls from many addresses cannot grow the
	// table without bound; 0 is 4096.
	Tracked int
}

func (rc *Receiver) init() {
	rc.once.Do(func() {
		rc.slots = make(chan struct{}, orDefault(rc.MaxInFlight, DefaultMaxInFlight))
		rc.peers = newPeers(rc.PerSource)
	})
}

func orDefault[T int | int64 | float64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// ServeHTTP handles POST /hooks/<namespace>/<name>, counting its answer
// in manifestsync_webhook_requests_total.
func (rc *Receiver) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	rc.init()
	w := &statusWriter{ResponseWriter: rw}
	defer w.count()
	key, ok := parsePath(req.URL.Path)
	if !ok {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	source := sourceOf(req.RemoteAddr)
	release, status := rc.admit(source)
	if status != 0 {
		w.Header().Set("Retry-After", "1")
		http.Error(w, http.StatusText(status), status)
		return
	}
	defer release()
	log := rc.Log.WithValues("manifestSync", key.String(), "remote", req.RemoteAddr)
	ctx := req.Context()
	ms := &v1alpha1.ManifestSync{}
	syncs := client.Reader(rc.Client)
	if rc.Syncs != nil {
		syncs = rc.Syncs
	}
	if err := syncs.Get(ctx, key, ms); err != nil {
		if apierrors.IsNotFound(err) {
			http.NotFound(w, req)
			return
		}
		log.Error(err, "reading the ManifestSync")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	secretName := ms.Annotations[SecretAnnotation]
	if secretName == "" {
		// Not opted in: as if it did not exist.
		http.NotFound(w, req)
		return
	}
	if signatureHeader(req.Header) == "" {
		log.V(1).Info("rejected a webhook call", "reason", ErrNoSignature.Error())
		http.Error(w, "unauthorized: "+ErrNoSignature.Error(), http.StatusUnauthorized)
		return
	}
	maxBody := orDefault(rc.MaxBody, DefaultMaxBody)
	if req.ContentLength > maxBody {
		http.Error(w, fmt.Sprintf("payload over %d bytes", maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	token, err := rc.token(ctx, key.Namespace, secretName)
	if err != nil {
		log.Error(err, "reading the webhook secret")
		http.Error(w, "the webhook secret is not available", http.StatusInternalServerError)
		return
	}
	prefix, err := verifyStream(req.Header, http.MaxBytesReader(rw, req.Body, maxBody), token)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("payload over %d bytes", maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		log.V(1).Info("rejected a webhook call", "reason", err.Error())
		http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
		return
	}
	push := parsePush(prefix)
	if err := rc.request(ctx, ms); err != nil {
		if apierrors.IsNotFound(err) {
			http.NotFound(w, req)
			return
		}
		log.Error(err, "requesting a reconcile")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	log.Info("fetch requested by webhook", "event", eventOf(req.Header), "ref", push.Ref, "after", push.After)
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "fetch requested\n")
}

// admit takes a slot for a call from source, or says which status refuses
// it: 429 over the source's rate or its calls at once, 503 when every
// slot is taken. It never waits.
func (rc *Receiver) admit(source string) (release func(), status int) {
	p, ok := rc.peers.admit(source)
	if !ok {
		return nil, http.StatusTooManyRequests
	}
	select {
	case rc.slots <- struct{}{}:
	default:
		rc.peers.done(p)
		return nil, http.StatusServiceUnavailable
	}
	return func() {
		<-rc.slots
		rc.peers.done(p)
	}, 0
}

// parsePath returns the ManifestSync of a path /hooks/<namespace>/<name>.
func parsePath(path string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(path, PathPrefix)
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, name, ok := strings.Cut(rest, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// token reads the shared secret; an empty one is an error, as anybody
// could sign with it.
func (rc *Receiver) token(ctx context.Context, namespace, name string) ([]byte, error) {
	var secret corev1.Secret
	if err := rc.Secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret); err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	token := secret.Data[SecretKey]
	if len(token) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %q, or it is empty", namespace, name, SecretKey)
	}
	return token, nil
}

// request sets RequestedAtAnnotation, which makes the operator reconcile
// the ManifestSync and fetch its sources.
func (rc *Receiver) request(ctx context.Context, ms *v1alpha1.ManifestSync) error {
	now := time.Now
	if rc.Now != nil {
		now = rc.Now
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		RequestedAtAnnotation: now().UTC().Format(time.RFC3339Nano),
	}}})
	if err != nil {
		return err
	}
	return rc.Client.Patch(ctx, ms, client.RawPatch(types.MergePatchType, patch))
}

// Errors of Verify.
var (
	ErrNoSignature  = errors.New("no signature: want X-Hub-Signature-256, X-Gitea-Signature or X-Gitlab-Token")
	ErrBadSignature = errors.New("signature does not match")
)

// Verify checks that the request proves knowledge of token, by the first
// of these headers it has: X-Hub-Signature-256 (GitHub, and Gitea too),
// X-Gitea-Signature, X-Gogs-Signature, X-Gitlab-Token.
func Verify(h http.Header, body, token []byte) error {
	_, err := verifyStream(h, bytes.NewReader(body), token)
	return err
}

// signatureHeaders are the headers Verify reads, in its order.
var signatureHeaders = []string{"X-Hub-Signature-256", "X-Gitea-Signature", "X-Gogs-Signature", "X-Gitlab-Token"}

// signatureHeader is the first signature header h has, or "".
func signatureHeader(h http.Header) string {
	for _, name := range signatureHeaders {
		if h.Get(name) != "" {
			return name
		}
	}
	return ""
}

// verifyStream is Verify of a body read from r, through the HMAC as it
// comes: only its first pushPrefix bytes are kept, and returned. A token
// header (GitLab's) is checked before the body is read, and then only the
// prefix is read. Read errors (an http.MaxBytesError over the limit) are
// returned as they are.
func verifyStream(h http.Header, r io.Reader, token []byte) (prefix []byte, err error) {
	if len(token) == 0 {
		return nil, errors.New("no token to verify with")
	}
	var hexSig string
	switch name := signatureHeader(h); name {
	case "":
		return nil, ErrNoSignature
	case "X-Gitlab-Token":
		// Hashing both sides makes the comparison's time independent of
		// the lengths too.
		a, b := sha256.Sum256([]byte(h.Get(name))), sha256.Sum256(token)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return nil, ErrBadSignature
		}
		return io.ReadAll(io.LimitReader(r, pushPrefix))
	case "X-Hub-Signature-256":
		var ok bool
		if hexSig, ok = strings.CutPrefix(h.Get(name), "sha256="); !ok {
			return nil, fmt.Errorf("%w: X-Hub-Signature-256 must start with sha256=", ErrBadSignature)
		}
	default:
		hexSig = h.Get(name)
	}
	sig, err := hex.DecodeString(strings.TrimSpace(hexSig))
	if err != nil {
		return nil, fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	m := hmac.New(sha256.New, token)
	buf := &prefixBuffer{max: pushPrefix}
	if _, err := io.Copy(io.MultiWriter(m, buf), r); err != nil {
		return nil, err
	}
	// hmac.Equal takes the same time whatever the bytes compared.
	if !hmac.Equal(sig, m.Sum(nil)) {
		return nil, ErrBadSignature
	}
	return buf.b, nil
}

// prefixBuffer keeps the first max bytes written to it.
type prefixBuffer struct {
	b   []byte
	max int
}

func (p *prefixBuffer) Write(b []byte) (int, error) {
	if room := p.max - len(p.b); room > 0 {
		p.b = append(p.b, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

// Sign is the HMAC-SHA256 of body with token, as GitHub and Gitea sign.
func Sign(body, token []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write(body)
	return m.Sum(nil)
}

// push is what is logged of a push payload; GitHub, Gitea and GitLab
// all name the ref and the new commit so.
type push struct {
	Ref   string `json:"ref"`
	After string `json:"after"`
}

// parsePush reads the ref and commit of a payload's prefix, which may end
// in the middle of it: best effort, the payload decides nothing.
func parsePush(prefix []byte) push {
	var p push
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return p
	}
	for dec.More() && (p.Ref == "" || p.After == "") {
		tok, err := dec.Token()
		if err != nil {
			return p
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return p
		}
		switch tok {
		case "ref":
			_ = json.Unmarshal(v, &p.Ref)
		case "after":
			_ = json.Unmarshal(v, &p.After)
		}
	}
	return p
}

// eventOf is the event type the Git server named.
func eventOf(h http.Header) string {
	for _, name := range []string{"X-GitHub-Event", "X-Gitea-Event", "X-Gitlab-Event"} {
		if v := h.Get(name); v != "" {
			return v
		}
	}
	return ""
}

// Server serves a Receiver on an address until its context ends; it is a
// manager.Runnable that runs on every replica, leader or not.
//
// Its timeouts keep slow clients from holding connections: the headers
// must arrive within ReadHeaderTimeout (5 s) and the whole request within
// ReadTimeout (20 s: 1 MiB at 50 KiB/s), an idle kept-alive connection is
// closed after IdleTimeout (30 s), headers are at most MaxHeaderBytes (16
// KiB; a Git server sends about 1), and at most MaxConns connections are
// open at once (256; more wait in the kernel's accept queue).
type Server struct {
	Addr     string
	Receiver *Receiver
	// Zero values are the defaults above.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes, MaxConns                                  int
	// listening receives the address once it listens.
	listening chan net.Addr
}

// NewServer returns a Server of rc on addr.
func NewServer(addr string, rc *Receiver) *Server {
	return &Server{Addr: addr, Receiver: rc, listening: make(chan net.Addr, 1)}
}

// NeedLeaderElection is false: the receiver only sets an annotation.
func (s *Server) NeedLeaderElection() bool { return false }

// Listening returns the address the server listens on, once it does.
func (s *Server) Listening() <-chan net.Addr { return s.listening }

func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Start serves until ctx ends, then shuts down gracefully.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, s.Receiver)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: durationOr(s.ReadHeaderTimeout, 5*time.Second),
		ReadTimeout:       durationOr(s.ReadTimeout, 20*time.Second),
		WriteTimeout:      durationOr(s.WriteTimeout, 20*time.Second),
		IdleTimeout:       durationOr(s.IdleTimeout, 30*time.Second),
		MaxHeaderBytes:    orDefault(s.MaxHeaderBytes, 16<<10),
		// Connection errors (a client's reset) are the client's.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
	l = netutil.LimitListener(l, orDefault(s.MaxConns, 256))
	if s.listening != nil {
		s.listening <- l.Addr()
	}
	s.Receiver.Log.Info("serving webhooks", "address", l.Addr().String(), "path", PathPrefix+"<namespace>/<name>")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("webhook receiver: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("webhook receiver: shutting down: %w", err)
	}
	return nil
}
