package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	ctrl "sigs.k8s.io/controller-runtime"
)

// APIServerProbe tells whether the API server answers, for the operator's
// readiness check, the metric manifestsync_apiserver_reachable and its
// logs, and holds the caches' list and watch calls while it does not.
//
// Why hold them: every informer of controller-runtime's caches runs a
// client-go reflector, which retries a failed list or watch after an
// exponential backoff (0.8s doubling, plus up to as much again in jitter,
// up to [30s, 60s)). After an API server outage of 20s, the watches came
// back 40-56s late, and changes went unnoticed until then. Neither
// client-go v0.37 nor controller-runtime v0.25 lets a caller set that
// backoff (ReflectorOptions.Backoff does not reach a SharedIndexInformer:
// kubernetes/kubernetes#136943); what controller-runtime offers is
// cache.Options.NewInformer. The informers made by NewInformer call the
// API server only once the probe sees it ready: during an outage a
// reflector waits (taking no further backoff step) instead of failing, and
// resumes within a probe period of the API server answering again. Watches
// already established are left alone.
//
// The probe GETs /readyz every second (which every authenticated user may,
// through the system:public-info-viewer role). A server that answers but
// stays unready for longer than notReadyGrace lets the calls through, so
// that the caches never wait on a /readyz that fails for a reason of its
// own.
type APIServerProbe struct {
	client rest.Interface
	log    logr.Logger

	mu sync.Mutex
	// since is when the current outage began; zero while the API server
	// is ready.
	since time.Time
	// answered is when, in the current outage, the API server began to
	// answer (not ready); zero while it does not answer.
	answered time.Time
	err      error // of the last probe
	// open is closed while list and watch calls may go.
	open chan struct{}
	// remote, for the probe of a remote cluster, leaves the metrics of
	// the operator's own API server alone, and changed is called when
	// the cluster becomes unreachable or reachable again.
	remote  bool
	changed func()
}

const (
	probePeriod   = time.Second
	probeTimeout  = 2 * time.Second
	notReadyGrace = 10 * time.Second
)

// NewAPIServerProbe returns a probe of the API server of cfg. It holds
// nothing until it runs (see SetupWithManager).
func NewAPIServerProbe(cfg *rest.Config) (*APIServerProbe, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = probeTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server probe: %w", err)
	}
	RegisterMetrics()
	open := make(chan struct{})
	close(open)
	return &APIServerProbe{client: dc.RESTClient(), log: ctrl.Log.WithName("apiserver"), open: open}, nil
}

// SetupWithManager runs the probe with mgr, on every replica (their caches
// run whether they lead or not), and adds its readiness check "apiserver".
func (p *APIServerProbe) SetupWithManager(mgr ctrl.Manager) error {
	p.log = mgr.GetLogger().WithName("apiserver")
	if err := mgr.Add(p); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("apiserver", p.Check)
}

// NeedLeaderElection is false: the probe runs on every replica.
func (p *APIServerProbe) NeedLeaderElection() bool { return false }

// Start probes the API server every probePeriod until ctx is done.
func (p *APIServerProbe) Start(ctx context.Context) error {
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	for {
		answered, err := p.probe(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.observe(time.Now(), answered, err)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// probe GETs /readyz once; answered tells whether the API server sent a
// response at all.
func (p *APIServerProbe) probe(ctx context.Context) (answered bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var code int
	body, err := p.client.Get().AbsPath("/readyz").MaxRetries(0).Do(ctx).StatusCode(&code).Raw()
	switch {
	case code == 0:
		return false, fmt.Errorf("GET /readyz: %w", err)
	case code == http.StatusUnauthorized: // a remote cluster's credentials
		return true, fmt.Errorf("GET /readyz: %w", apierrors.NewUnauthorized("the credentials were refused"))
	case code != http.StatusOK:
		return true, fmt.Errorf("GET /readyz: %d %s%s", code, http.StatusText(code), failedChecks(body))
	}
	return true, nil
}

// failedChecks lists the failed checks of a /readyz answer ("[-]etcd
// failed: reason withheld"), after a colon.
func failedChecks(body []byte) string {
	var failed []string
	for line := range strings.Lines(string(body)) {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]"); ok {
			failed = append(failed, c)
		}
	}
	if len(failed) == 0 {
		return ""
	}
	return ": " + strings.Join(failed, "; ")
}

// observe records the result of a probe made at now: it logs, counts and
// gates the transitions.
func (p *APIServerProbe) observe(now time.Time, answered bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
	if err == nil {
		if !p.since.IsZero() {
			p.log.Info("API server reachable again; watches resume", "outage", now.Sub(p.since).Round(time.Millisecond))
			p.notify()
		}
		p.since, p.answered = time.Time{}, time.Time{}
		if !p.remote {
			apiServerReachable.Set(1)
		}
		p.gate(true)
		return
	}
	if p.since.IsZero() {
		p.since = now
		p.log.Error(err, "API server unreachable; watches wait until it answers, and changes made meanwhile are picked up then")
		if !p.remote {
			apiServerReachable.Set(0)
			apiServerOutages.Inc()
		}
		p.notify()
	}
	switch {
	case !answered:
		p.answered = time.Time{}
	case p.answered.IsZero():
		p.answered = now
	}
	p.gate(!p.answered.IsZero() && now.Sub(p.answered) >= notReadyGrace)
}

// gate opens or closes the gate of list and watch calls.
func (p *APIServerProbe) gate(open bool) {
	select {
	case <-p.open:
		if !open {
			p.open = make(chan struct{})
		}
	default:
		if open {
			close(p.open)
		}
	}
}

// wait returns once list and watch calls may go, or ctx is done.
func (p *APIServerProbe) wait(ctx context.Context) error {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notify calls changed, if any, without holding up the probe.
func (p *APIServerProbe) notify() {
	if p.changed != nil {
		go p.changed()
	}
}

// Check is the readiness check: it fails while the API server does not
// answer /readyz with 200.
func (p *APIServerProbe) Check(*http.Request) error {
	if since, err := p.down(); err != nil {
		return fmt.Errorf("API server unreachable for %v: %w", time.Since(since).Round(time.Second), err)
	}
	return nil
}

// down says since when the API server has not answered /readyz with 200,
// and why; a nil error while it does.
func (p *APIServerProbe) down() (time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.since.IsZero() {
		return time.Time{}, nil
	}
	return p.since, p.err
}

// NewInformer is a cache.Options.NewInformer: client-go's informer, whose
// list and watch calls wait while the probe fails. A nil probe makes
// client-go's informer as it is.
func (p *APIServerProbe) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	if p != nil {
		lw = gatedListerWatcher{lw: toolscache.ToListerWatcherWithContext(lw), inner: lw, wait: p.wait}
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// gatedListerWatcher waits for its gate before each list and watch.
type gatedListerWatcher struct {
	lw    toolscache.ListerWatcherWithContext
	inner toolscache.ListerWatcher
	wait  func(context.Context) error
}

func (g gatedListerWatcher) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.lw.ListWithContext(ctx, opts)
}

func (g gatedListerWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.lw.WatchWithContext(ctx, opts)
}

// List and Watch, without a context, are not gated; client-go's
// reflector calls those with one.
func (g gatedListerWatcher) List(opts metav1.ListOptions) (runtime.Object, error) {
	return g.inner.List(opts)
}

func (g gatedListerWatcher) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return g.inner.Watch(opts)
}

// IsWatchListSemanticsUnSupported tells client-go's reflector what the
// wrapped ListerWatcher would.
func (g gatedListerWatcher) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(g.inner)
}
