// Package ui is the web UI of ManifestSync: an HTTP server that shows every
// ManifestSync a user may see (an overview, one ManifestSync's inputs,
// conditions, targets and their trees, its diff, history and events), acts
// on them (sync now, suspend, resume, rollback, undo) and keeps the open
// pages live through server-sent events.
//
// One code serves two modes. ModeLocal (`engine ui`) does every read and
// action with the user's own kubeconfig. ModeCluster (`engine operator
// --ui-bind-address`) takes a bearer token per request (a header, or the
// session cookie of the login page), checks it with a TokenReview and does
// every read and action as that user through impersonation, so that nobody
// sees or does through the UI what kubectl would refuse them. The operator's
// own rights serve only the shared watch of ManifestSyncs (the overview and
// the live stream, each filtered per user by SubjectAccessReviews), the
// reviews themselves and the Events recording who acted.
//
// Pages are rendered with html/template from files embedded with go:embed
// (ui/web), with one small script and one stylesheet: no build step, no
// request to the internet. The data beyond a ManifestSync's status comes
// from package ui/inspect, always read with the user's client.
//
// Only cmd/engine (`engine ui`, `engine operator`) imports it; the engine
// and the operator's controllers must not, and it imports no front-end
// tooling: what it serves is in ui/web as written.
package ui

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// Mode says whose rights the UI uses.
type Mode int

const (
	// ModeLocal does every read and action with Options.Config, the
	// user's own kubeconfig.
	ModeLocal Mode = iota
	// ModeCluster takes a bearer token per request, checks it with a
	// TokenReview and does every read and action as its user through
	// impersonation on top of Options.Config (the operator's).
	ModeCluster
)

// Options configure a Server.
type Options struct {
	Mode Mode
	// Config is the user's kubeconfig (ModeLocal) or the operator's
	// (ModeCluster).
	Config *rest.Config
	// Cache, when set, holds the shared informers to hook into (the
	// operator passes its manager's cache, so that the UI adds no watch);
	// nil: the server starts its own informer on ManifestSyncs.
	Cache cache.Cache
	// Selector, when not nil, selects the ManifestSyncs of the server's
	// own informer (Cache nil): the operator's --watch-label-selector.
	Selector labels.Selector
	// Evaluator serves the diff view; nil: the diff view says it is not
	// available.
	Evaluator inspect.Evaluator
	// InstanceID is the operator's --instance-id, for the diff.
	InstanceID string
	// Namespace is, in ModeLocal, the kubeconfig context's namespace: the
	// watch's scope when the user may not list ManifestSyncs cluster-wide.
	Namespace string
	Log       logr.Logger
}

// Limits of what the server holds and accepts.
const (
	maxBody           = 64 << 10 // a request body (a login, an action's form)
	maxSessions       = 10000
	sessionTTL        = 8 * time.Hour
	maxTokenReviews   = 4096
	tokenReviewTTL    = time.Minute
	maxAccessReviews  = 65536
	accessReviewTTL   = 10 * time.Second
	maxUserClients    = 256
	maxStreams        = 1000
	maxStreamsPerUser = 20
	keepAlive         = 15 * time.Second
	writeTimeout      = 30 * time.Second
	apiTimeout        = 30 * time.Second
	maxDiffs          = 4
)

// Server is the web UI: an http.Handler, and a manager.Runnable for its
// watch.
type Server struct {
	opts    Options
	log     logr.Logger
	scheme  *runtime.Scheme
	handler http.Handler

	// base is a client of Options.Config: the user's in ModeLocal, the
	// operator's in ModeCluster (reviews, events, nothing a user sees).
	base      client.Client
	clientset kubernetes.Interface
	mapper    meta.RESTMapper
	// httpClient is shared by every client made of Options.Config, so
	// that they share connections.
	httpClient *http.Client

	store    *store
	sessions *sessions
	reviews  *ttlCache[*identity]
	// reviewLimit bounds the TokenReviews of tokens not in reviews.
	reviewLimit *rate.Limiter
	access      *ttlCache[bool]
	clients     *lru[client.Client]

	localUserOnce sync.Once
	localUser     string

	streams streamCount
	// diffs bounds the diffs and comparisons of commits running at once.
	diffs chan struct{}
}

// New makes a Server. It contacts no API server: Start runs the watch.
func New(opts Options) (*Server, error) {
	if opts.Config == nil {
		return nil, errors.New("ui: no rest config")
	}
	if opts.Mode != ModeLocal && opts.Mode != ModeCluster {
		return nil, fmt.Errorf("ui: unknown mode %d", opts.Mode)
	}
	// Pages read many objects at once (a tree reads each one): client-go's
	// default of 5 requests a second would make them crawl.
	opts.Config = rest.CopyConfig(opts.Config)
	if opts.Config.QPS == 0 && opts.Config.RateLimiter == nil {
		opts.Config.QPS, opts.Config.Burst = 50, 100
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("ui: scheme: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("ui: scheme: %w", err)
	}
	httpClient, err := rest.HTTPClientFor(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("ui: http client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(opts.Config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("ui: rest mapper: %w", err)
	}
	base, err := client.New(opts.Config, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return nil, fmt.Errorf("ui: client: %w", err)
	}
	clientset, err := kubernetes.NewForConfigAndClient(opts.Config, httpClient)
	if err != nil {
		return nil, fmt.Errorf("ui: clientset: %w", err)
	}
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	s := &Server{
		opts:        opts,
		log:         log,
		scheme:      scheme,
		base:        base,
		clientset:   clientset,
		mapper:      mapper,
		httpClient:  httpClient,
		store:       newStore(),
		sessions:    newSessions(),
		reviews:     newTTLCache[*identity](maxTokenReviews),
		reviewLimit: rate.NewLimiter(rate.Limit(20), 50),
		access:      newTTLCache[bool](maxAccessReviews),
		clients:     newLRU[client.Client](maxUserClients),
		diffs:       make(chan struct{}, maxDiffs),
	}
	if err := parseTemplates(); err != nil {
		return nil, err
	}
	s.handler = s.routes()
	return s, nil
}

// NeedLeaderElection is false: every replica of the operator serves the
// UI.
func (s *Server) NeedLeaderElection() bool { return false }

// ServeHTTP serves the whole UI.
// Every request notes the store's cursor before it reads anything: a page
// carries it, so that its stream starts from there (a change while the page
// was read is not lost).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), cursorKey{}, s.store.now())))
}

// cursorKey holds a request's cursor in its context.
type cursorKey struct{}

// Start runs the watch of ManifestSyncs that feeds the overview and the
// live stream, until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	return s.runWatch(ctx)
}

// ListenAndServe serves h on addr until ctx ends (see Serve).
func ListenAndServe(ctx context.Context, addr string, h http.Handler, log logr.Logger) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ui: listening on %s: %w", addr, err)
	}
	return Serve(ctx, l, h, log)
}

// maxConns bounds the connections the server holds at once: every
// stream it allows, and room for the pages beside them.
const maxConns = maxStreams + 128

// Serve serves h on l until ctx ends, then shuts down within 5 s. Its
// timeouts bound slow clients, and its listener the connections held at
// once; the live stream sets its own write deadlines, so that there is no
// overall write timeout (the streams end with ctx: Start stops them).
func Serve(ctx context.Context, l net.Listener, h http.Handler, log logr.Logger) error {
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	log.Info("serving the web UI", "address", "http://"+l.Addr().String())
	l = netutil.LimitListener(l, maxConns)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("ui: serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		_ = srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("ui: serving: %w", err)
	}
	return nil
}

// readTimeout bounds the reading of a request (its header and body); a
// stream outlives it (net/http lifts it once the request is read). A
// variable for tests.
var readTimeout = 30 * time.Second

// loopbackHost reports whether a request's Host names this machine in a
// way a foreign web page cannot make a browser send to it: an IP address
// or localhost. Any other name may be a DNS rebinding of an attacker's
// domain to 127.0.0.1.
func loopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if net.ParseIP(h) != nil {
		return true
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}
