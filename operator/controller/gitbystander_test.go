package controller

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// Bystander isolation, git's part: four ManifestSyncs whose git servers
// accept connections and never answer do not delay the others: a fresh
// ManifestSync with a git source is Ready within 5 s, and the stuck ones
// report a reason within their fetch timeout. Before, each stuck fetch
// held a reconcile worker for its whole timeout (a minute), and four of
// them every worker of the operator. Once the ManifestSyncs are deleted,
// the git cache holds nothing of them within a sweep.
//
// What a hostile tenant gets: its own ManifestSync fails ("fetch in
// progress", then the timeout); nobody else's is slowed.
func TestGitBystanderIsolation(t *testing.T) {
	env.Need(t)
	const fetchTimeout = 20 * time.Second
	cache := gitOperator(t, git.Options{Timeout: fetchTimeout})
	ns := remoteEnv.Namespace(t, nil)

	content := t.TempDir()
	if err := os.WriteFile(filepath.Join(content, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-git}\ndata: {k: v}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	gittest.Publish(t, root, "config", content)
	goodURL := gittest.Daemon(t, root) + "/config.git"

	var all []*v1alpha1.ManifestSync
	create := func(name, url string) *v1alpha1.ManifestSync {
		t.Helper()
		ms := createGitSync(t, ns, name, url)
		all = append(all, ms)
		return ms
	}
	var stuck []*v1alpha1.ManifestSync
	for i := range 4 {
		url := fmt.Sprintf("http://127.0.0.1:%d/repo.git", gittest.Blackhole(t))
		stuck = append(stuck, create(fmt.Sprintf("blackhole-%d", i), url))
	}
	start := time.Now()
	fresh := create("fresh", goodURL)
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(fresh), v1alpha1.ReasonSynced, time.Minute)
	took := time.Since(start)
	t.Logf("a fresh ManifestSync was Ready %v after it was created with four on blackholed git servers", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("the fresh ManifestSync was Ready %v after it was created, beside the stuck ones; want within 5s", took.Round(time.Millisecond))
	}

	// Every stuck one reports its cause within its fetch timeout.
	for _, ms := range stuck {
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSourceFailed, fetchTimeout)
		msg := condition(got, v1alpha1.ConditionReady).Message
		if !strings.Contains(msg, `source "repo": git http://127.0.0.1:`) || !strings.Contains(msg, "fetch in progress") && !strings.Contains(msg, "timeout") {
			t.Errorf("%s: %q; want it to name the source and say the fetch waits or timed out", ms.Name, msg)
		}
	}
	if _, repos := cache.Fetcher.CacheBytes(); repos == 0 {
		t.Error("the cache holds no repository while ManifestSyncs use them")
	}

	// Deleted, their repositories leave the cache at the next sweep.
	deleteAndSweep(t, cache, all)
}

// gitOperator runs, until the test ends, an operator of its own on the
// second API server (where no other operator runs) with the real git
// provider: a GitCache of opts, swept every second. It returns the cache.
func gitOperator(t *testing.T, opts git.Options) *GitCache {
	t.Helper()
	cache := NewGitCache(opts)
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Git = cache.Provider
		return mgr.Add(cache.Sweeper(mgr.GetClient(), time.Second))
	})
	return cache
}

// createGitSync creates, on the second API server, a ManifestSync of ns
// whose one source is the git repository at url.
func createGitSync(t *testing.T, ns, name, url string) *v1alpha1.ManifestSync {
	t.Helper()
	ms := newSync(ns, name, v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: url}}},
		Targets: targets(ns),
	})
	if err := remoteEnv.Client.Create(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// deleteAndSweep deletes every ManifestSync of all and checks that their
// repositories leave the cache within a minute. Only theirs: the test
// operator reconciles the ManifestSyncs of other tests on the same API
// server too, whose repositories it keeps while they are named.
func deleteAndSweep(t *testing.T, cache *GitCache, all []*v1alpha1.ManifestSync) {
	t.Helper()
	for _, ms := range all {
		if err := remoteEnv.Client.Delete(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var held []string
		for _, ms := range all {
			for _, src := range ms.Spec.Sources {
				if src.Git != nil && cache.Fetcher.Holds(src.Git.URL) {
					held = append(held, src.Git.URL)
				}
			}
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			bytes, repos := cache.Fetcher.CacheBytes()
			t.Fatalf("a minute after the ManifestSyncs were deleted the cache holds their repositories %v (%d bytes in %d repositories in all)", held, bytes, repos)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
