package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/helm/helmtest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// A ManifestSync with a helm source syncs the chart's objects, its input
// revision CHART@VERSION@sha256:DIGEST; a new version within the range is
// picked up at the next poll; polls of an unchanged repository download no
// chart and no index body.
func TestHelmSourceSyncs(t *testing.T) {
	env.Need(t)
	cache := helmOperator(t)
	repo := helmtest.NewRepo(t)
	v1 := helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil))
	repo.Add("demo", "1.0.0", v1)
	ns := remoteEnv.Namespace(t, nil)
	ms := newSync(ns, "web", v1alpha1.ManifestSyncSpec{
		Sources:  []v1alpha1.Source{{Name: "chart", Helm: &v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL, Insecure: true}}},
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Second},
	})
	ctx := context.Background()
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(ms)
	got := remoteEnv.WaitForReason(t, key, v1alpha1.ReasonSynced, time.Minute)
	if rev := got.Status.Inputs.Sources["chart"]; rev != "demo@1.0.0@"+helmtest.Digest(v1) {
		t.Fatalf("input revision %q", rev)
	}
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-demo"}, cm); err != nil || cm.Data["version"] != "1.0.0" {
		t.Fatalf("the chart's ConfigMap: %v, %v", cm.Data, err)
	}

	// Unchanged polls: answers 304, no chart.
	bodies, fetched, polls := repo.IndexBodies.Load(), repo.Charts.Load(), repo.NotModified.Load()
	testenv.Eventually(t, time.Minute, func() error {
		if repo.NotModified.Load() < polls+3 {
			return errors.New("fewer than 3 polls")
		}
		return nil
	})
	if repo.IndexBodies.Load() != bodies || repo.Charts.Load() != fetched {
		t.Fatalf("unchanged polls downloaded %d index bodies and %d charts", repo.IndexBodies.Load()-bodies, repo.Charts.Load()-fetched)
	}
	if n := counterValue(helmFetchesTotal.WithLabelValues(ns, "web", "chart", "success")); n < 4 {
		t.Errorf("manifestsync_helm_fetches_total{result=success} is %v after 4 polls", n)
	}
	downloads, hits, bytes, _ := cache.Fetcher.Stats()
	t.Logf("after %d polls answered 304: %d chart downloads, %d cache hits, %d bytes cached", repo.NotModified.Load(), downloads, hits, bytes)

	v11 := helmtest.Package("demo", helmtest.Chart("demo", "1.1.0", nil))
	repo.Add("demo", "1.1.0", v11)
	testenv.Eventually(t, time.Minute, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		if rev := cur.Status.Inputs.Sources["chart"]; rev != "demo@1.1.0@"+helmtest.Digest(v11) {
			return errors.New("input revision " + rev)
		}
		return remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-demo"}, cm)
	})
	if cm.Data["version"] != "1.1.0" {
		t.Fatalf("after 1.1.0: %v", cm.Data)
	}
}

// What a chart repository that accepts requests and never answers gets:
// its ManifestSyncs fail SourceFailed ("fetch in progress", then the
// timeout) naming the source and repository, holding no worker: a fresh
// ManifestSync of a good repository is Ready within 5 s beside them.
func TestHelmBystanderIsolation(t *testing.T) {
	env.Need(t)
	const fetchTimeout = 10 * time.Second
	cache := NewHelmCache(charts.Options{Timeout: fetchTimeout})
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Helm = cache.Provider
		return nil
	})
	ns := remoteEnv.Namespace(t, nil)
	create := func(name, url string) *v1alpha1.ManifestSync {
		t.Helper()
		ms := newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "chart", Helm: &v1alpha1.HelmSource{Chart: "demo", Repository: url, Insecure: true}}},
			Targets: targets(ns),
		})
		if err := remoteEnv.Client.Create(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	var silent []*helmtest.Repo
	for range 4 {
		silent = append(silent, helmtest.NewRepo(t))
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) }) // before the servers close
	var stuck []*v1alpha1.ManifestSync
	for i, silent := range silent {
		silent.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}))
		stuck = append(stuck, create(fmt.Sprintf("silent-%d", i), silent.URL))
	}
	good := helmtest.NewRepo(t)
	good.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	start := time.Now()
	fresh := create("fresh", good.URL)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(fresh), v1alpha1.ReasonSynced, time.Minute)
	took := time.Since(start)
	t.Logf("a fresh ManifestSync was Ready %v after it was created with four on silent chart repositories", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the fresh ManifestSync was Ready %v after it was created; want within 5s", took.Round(time.Millisecond))
	}
	for _, ms := range stuck {
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSourceFailed, 2*fetchTimeout)
		msg := condition(got, v1alpha1.ConditionReady).Message
		if n := counterValue(helmFetchesTotal.WithLabelValues(ns, ms.Name, "chart", "pending")); n < 1 {
			t.Errorf("%s: manifestsync_helm_fetches_total{result=pending} is %v", ms.Name, n)
		}
		if !strings.Contains(msg, `source "chart": helm chart demo`) || !strings.Contains(msg, "fetch in progress") && !strings.Contains(msg, "timed out") {
			t.Errorf("%s: %q; want it to name the source and chart and say the fetch waits or timed out", ms.Name, msg)
		}
	}
}

// helmOperator runs, until the test ends, an operator of its own on the
// second API server with the real helm provider (a HelmCache, swept every
// second). It returns the cache.
func helmOperator(t *testing.T) *HelmCache {
	t.Helper()
	cache := NewHelmCache(charts.Options{Timeout: 20 * time.Second})
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Helm = cache.Provider
		return mgr.Add(cache.Sweeper(mgr.GetClient(), time.Second))
	})
	return cache
}

// ownOperator runs, until the test ends, an operator of its own on the
// second API server (where no other operator runs), its reconciler and
// manager given to setup first (the providers under test, their sweepers).
func ownOperator(t *testing.T, setup func(r *Reconciler, mgr ctrl.Manager) error) {
	t.Helper()
	mctx, cancel := context.WithCancel(context.Background())
	mgr, r, err := newOperator(mctx, &testenv.Env{Config: remoteEnv.Config, Scheme: remoteEnv.Scheme})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := setup(r, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	stop, err := testenv.StartManager(mctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}
