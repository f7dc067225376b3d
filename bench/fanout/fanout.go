// Package fanout holds workloads W1 (fan-out) and W2 (steady state) of the
// benchmarks. Both run on one fixture: a ManifestSync that replicates one
// Secret into 1,000 namespaces, reconciled by `engine operator` running as
// a process of its own, and an independent watcher with its own client
// that sees every copy change. W1 measures how fast a source change
// reaches every copy against a client-go floor and kubectl; W2 measures
// what resyncing unchanged copies costs the API server against a
// Flux-style reconcile.
package fanout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/manifestsync/manifestsync/bench/harness"
)

const (
	// Targets is the number of namespaces the Secret is replicated to.
	Targets = 1000
	// Workers is the floor's concurrency, and the operator's per-target
	// concurrency.
	Workers = 8

	home       = "bench-home"
	secretName = "fanout"
	floorName  = "fanout-floor"
	kubectlNm  = "fanout-kubectl"
	syncName   = "fanout"
	ownerLabel = "manifestsync.dev/owner"
)

var syncGVR = schema.GroupVersionResource{Group: "manifestsync.dev", Version: "v1alpha1", Resource: "manifestsyncs"}

// payload is the Secret's data beside its version: a certificate-sized
// value, so that every write carries a realistic body.
var payload = []byte(strings.Repeat("MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJRTESMBAGA1UE", 14))

// Fixture is the cluster state W1 and W2 share.
type Fixture struct {
	c        *harness.Cluster
	cs       kubernetes.Interface
	dyn      dynamic.Interface
	op       *harness.Operator
	watcher  *watcher
	ns       []string
	engine   string
	kubectl  string // "" when absent
	dir      string
	version  int
	opFlags  []string      // the operator's flags
	InitSync time.Duration // the first sync of all copies
}

// Setup creates the namespaces and the source, starts the operator from
// engineBin and the watcher, and waits for the first sync of every copy.
// kubectl is the kubectl binary, "" when there is none.
func Setup(ctx context.Context, c *harness.Cluster, engineBin, kubectl, dir string) (*Fixture, error) {
	cfg := rest.CopyConfig(c.Config)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := &Fixture{c: c, cs: cs, dyn: dyn, engine: engineBin, kubectl: kubectl, dir: dir}
	for i := range Targets {
		f.ns = append(f.ns, fmt.Sprintf("bench-t%04d", i))
	}
	if err := parallel(ctx, append([]string{home}, f.ns...), func(ns string) error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("creating namespaces: %w", err)
	}
	if f.watcher, err = startWatcher(ctx, c.Config); err != nil {
		return nil, err
	}
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: secretName}, Data: data("v0")}
	if _, err := cs.CoreV1().Secrets(home).Create(ctx, src, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	f.opFlags = []string{"--target-concurrency", fmt.Sprint(Workers)}
	f.op, err = harness.StartOperator(ctx, c, engineBin, dir+"/operator.log", f.opFlags...)
	if err != nil {
		return nil, err
	}
	w := f.watcher.expect(secretName, "v0")
	if err := f.createSync(ctx); err != nil {
		f.Stop()
		return nil, err
	}
	lags, err := w.wait(ctx)
	if err != nil {
		f.Stop()
		return nil, fmt.Errorf("first sync: %w", err)
	}
	f.InitSync = maxOf(lags)
	return f, nil
}

// Stop stops the operator and the watcher.
func (f *Fixture) Stop() {
	if f.op != nil {
		_ = f.op.Stop()
	}
	f.watcher.stop()
}

// OperatorRSS is the operator's peak RSS so far, in MiB.
func (f *Fixture) OperatorRSS() float64 {
	n, err := f.op.PeakRSS()
	if err != nil {
		return 0
	}
	return float64(n) / (1 << 20)
}

func (f *Fixture) createSync(ctx context.Context) error {
	var targets []any
	for i, ns := range f.ns {
		targets = append(targets, map[string]any{"name": fmt.Sprintf("t%04d", i), "namespace": ns})
	}
	ms := map[string]any{
		"apiVersion": "manifestsync.dev/v1alpha1",
		"kind":       "ManifestSync",
		"metadata":   map[string]any{"name": syncName, "namespace": home},
		"spec": map[string]any{
			"interval": "1h",
			"sources":  []any{map[string]any{"name": "src", "object": map[string]any{"apiVersion": "v1", "kind": "Secret", "name": secretName}}},
			"targets":  targets,
		},
	}
	_, err := f.dyn.Resource(syncGVR).Namespace(home).Create(ctx, unstructuredOf(ms), metav1.CreateOptions{})
	return err
}

func data(version string) map[string][]byte {
	return map[string][]byte{"version": []byte(version), "tls.crt": payload}
}

// parallel runs fn over items with Workers goroutines; the first error
// wins.
func parallel(ctx context.Context, items []string, fn func(string) error) error {
	next := make(chan string)
	errs := make(chan error, Workers)
	var wg sync.WaitGroup
	for range Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range next {
				if err := fn(it); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		next <- it
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return ctx.Err()
}

func secretApply(ns, name, manager, version string) *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(name, ns).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": manager}).
		WithData(data(version))
}

// watcher sees every Secret change cluster-wide with its own client and
// times the copies of the current wave.
type watcher struct {
	w    watch.Interface
	mu   sync.Mutex
	wave *wave
}

type wave struct {
	name, version string
	start         time.Time
	want          int
	seen          map[string]time.Duration
	done          chan struct{}
	mu            *sync.Mutex // the watcher's
}

func startWatcher(ctx context.Context, cfg *rest.Config) (*watcher, error) {
	own := rest.CopyConfig(cfg)
	own.UserAgent = "bench-watcher"
	cs, err := kubernetes.NewForConfig(own)
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	w, err := cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: false})
	if err != nil {
		return nil, err
	}
	wt := &watcher{w: w}
	go wt.run()
	return wt, nil
}

func (wt *watcher) run() {
	for ev := range wt.w.ResultChan() {
		now := time.Now()
		s, ok := ev.Object.(*corev1.Secret)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			continue
		}
		wt.mu.Lock()
		if wv := wt.wave; wv != nil && s.Name == wv.name && string(s.Data["version"]) == wv.version {
			if _, dup := wv.seen[s.Namespace]; !dup && s.Namespace != home {
				wv.seen[s.Namespace] = now.Sub(wv.start)
				if len(wv.seen) == wv.want {
					close(wv.done)
				}
			}
		}
		wt.mu.Unlock()
	}
}

func (wt *watcher) stop() {
	if wt != nil {
		wt.w.Stop()
	}
}

// expect starts a wave: from now, the first event of each copy named name
// at version counts, until every target's copy is seen.
func (wt *watcher) expect(name, version string) *wave {
	const want = Targets
	wv := &wave{name: name, version: version, start: time.Now(), want: want, seen: map[string]time.Duration{}, done: make(chan struct{}), mu: &wt.mu}
	wt.mu.Lock()
	wt.wave = wv
	wt.mu.Unlock()
	return wv
}

// wait returns every copy's lag once all are seen.
func (wv *wave) wait(ctx context.Context) ([]time.Duration, error) {
	const timeout = 2 * time.Minute
	select {
	case <-wv.done:
	case <-time.After(timeout):
		return nil, fmt.Errorf("%s %s: %d of %d copies seen after %s", wv.name, wv.version, wv.count(), wv.want, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	wv.mu.Lock()
	defer wv.mu.Unlock()
	lags := make([]time.Duration, 0, len(wv.seen))
	for _, d := range wv.seen {
		lags = append(lags, d)
	}
	return lags, nil
}

func (wv *wave) count() int {
	wv.mu.Lock()
	defer wv.mu.Unlock()
	return len(wv.seen)
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func unstructuredOf(m map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: m}
}
