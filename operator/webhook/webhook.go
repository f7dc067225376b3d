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
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
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

// maxBody bounds a payload; GitHub's are at most 25 MiB, but a push
// notification's is far smaller, and the payload is not needed anyway.
const maxBody = 5 << 20

// Receiver is the HTTP handler of the webhooks.
type Receiver struct {
	// Client reads ManifestSyncs (the manager's cached client will do) and
	// sets RequestedAtAnnotation.
	Client client.Client
	// Secrets reads the webhook Secrets; an uncached reader, so that no
	// Secret body is cached cluster-wide.
	Secrets client.Reader
	Log     logr.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// ServeHTTP handles POST /hooks/<namespace>/<name>.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
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
	log := rc.Log.WithValues("manifestSync", key.String(), "remote", req.RemoteAddr)
	ctx := req.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, "payload too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	ms := &v1alpha1.ManifestSync{}
	if err := rc.Client.Get(ctx, key, ms); err != nil {
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
	token, err := rc.token(ctx, key.Namespace, secretName)
	if err != nil {
		log.Error(err, "reading the webhook secret")
		http.Error(w, "the webhook secret is not available", http.StatusInternalServerError)
		return
	}
	if err := Verify(req.Header, body, token); err != nil {
		log.Info("rejected a webhook call", "reason", err.Error())
		http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
		return
	}
	push := parsePush(body)
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
	if len(token) == 0 {
		return errors.New("no token to verify with")
	}
	if sig := h.Get("X-Hub-Signature-256"); sig != "" {
		hexSig, ok := strings.CutPrefix(sig, "sha256=")
		if !ok {
			return fmt.Errorf("%w: X-Hub-Signature-256 must start with sha256=", ErrBadSignature)
		}
		return checkHMAC(hexSig, body, token)
	}
	for _, name := range []string{"X-Gitea-Signature", "X-Gogs-Signature"} {
		if sig := h.Get(name); sig != "" {
			return checkHMAC(sig, body, token)
		}
	}
	if got := h.Get("X-Gitlab-Token"); got != "" {
		// Hashing both sides makes the comparison's time independent of
		// the lengths too.
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256(token)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return ErrBadSignature
		}
		return nil
	}
	return ErrNoSignature
}

// checkHMAC compares a hex HMAC-SHA256 of body with the one computed with
// token, in constant time.
func checkHMAC(hexSig string, body, token []byte) error {
	got, err := hex.DecodeString(strings.TrimSpace(hexSig))
	if err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	if !hmac.Equal(got, Sign(body, token)) {
		return ErrBadSignature
	}
	return nil
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

func parsePush(body []byte) push {
	var p push
	_ = json.Unmarshal(body, &p) // best effort: the payload decides nothing
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
type Server struct {
	Addr     string
	Receiver *Receiver
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

// Start serves until ctx ends, then shuts down gracefully.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, s.Receiver)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("webhook receiver: %w", err)
	}
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
