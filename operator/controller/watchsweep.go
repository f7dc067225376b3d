package controller

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Watches let go of. The watches of a namespace's sources, kubeconfig
// Secrets and object sets (watches.inNamespace, objectSets.watch) start
// at a ManifestSync's first use; one no ManifestSync of the operator's
// cache reads any more (deleted, its sources changed, or, under --shards
// auto, moved to another replica) is stopped and its informer removed by
// the sweep, so that a replica's memory follows its share and not every
// namespace it ever synced. A watch is kept while a ManifestSync of the
// cache may read it (the index keys of sourceIndexKeys, kubeConfigKeys
// and objectSetIndexKeys: a kind in a namespace, every kind of a
// namespace, a kind in every namespace), and for watchIdle after its last
// use, so that a ManifestSync its cache does not show yet (just created,
// or moved here) keeps the watch its reconcile started. One stopped and
// needed again is started again by the next reconcile that reads it;
// until then its reads go to the API server (namespaceCache). The
// managed cache's kinds are not swept (their objects leave it with their
// shard label; the idle watch stays).
const (
	watchSweepPeriod = 5 * time.Minute
	watchIdle        = 10 * time.Minute
)

// watchSweeper runs sweepWatches every watchSweepPeriod.
func (r *Reconciler) watchSweeper() manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		tick := time.NewTicker(watchSweepPeriod)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case now := <-tick.C:
				r.sweepWatches(ctx, now)
			}
		}
	})
}

// namespacedKind is a kind in a namespace, without its version.
type namespacedKind struct {
	gk        schema.GroupKind
	namespace string
}

// neededWatches is what the ManifestSyncs of the cache may read.
type neededWatches struct {
	sources, kubeConfigs, sets map[namespacedKind]bool
	wholeNamespaces            map[string]bool           // object sets of every kind of a namespace
	setsEverywhere             map[schema.GroupKind]bool // object sets of a kind in selected namespaces
}

func (n *neededWatches) keeps(key watchKey) bool {
	nk := namespacedKind{key.gvk.GroupKind(), key.namespace}
	switch key.purpose {
	case watchSources:
		return n.sources[nk]
	case watchKubeConfigs:
		return n.kubeConfigs[nk]
	case watchObjectSets:
		return n.keepsSet(key.gvk, key.namespace)
	}
	return true // the managed cache's: not swept
}

func (n *neededWatches) keepsSet(gvk schema.GroupVersionKind, namespace string) bool {
	gk := gvk.GroupKind()
	return n.sets[namespacedKind{gk, namespace}] || n.wholeNamespaces[namespace] || n.setsEverywhere[gk]
}

// needed reads what the ManifestSyncs of the cache may read; false when
// the cache cannot be listed.
func (r *Reconciler) needed(ctx context.Context) (*neededWatches, bool) {
	var list v1alpha1.ManifestSyncList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false
	}
	n := &neededWatches{sources: map[namespacedKind]bool{}, kubeConfigs: map[namespacedKind]bool{}, sets: map[namespacedKind]bool{},
		wholeNamespaces: map[string]bool{}, setsEverywhere: map[schema.GroupKind]bool{}}
	secret := schema.GroupKind{Kind: "Secret"}
	for i := range list.Items {
		ms := &list.Items[i]
		for _, key := range sourceIndexKeys(ms) {
			// group/Kind/namespace/name
			if p := strings.SplitN(key, "/", 4); len(p) == 4 {
				n.sources[namespacedKind{schema.GroupKind{Group: p[0], Kind: p[1]}, p[2]}] = true
			}
		}
		for _, key := range kubeConfigKeys(ms) {
			if ns, _, ok := strings.Cut(key, "/"); ok {
				n.kubeConfigs[namespacedKind{secret, ns}] = true
			}
		}
		for _, key := range objectSetIndexKeys(ms) {
			// group/Kind/namespace, */namespace, or setsOfAnyNamespace
			p := strings.Split(key, "/")
			switch {
			case len(p) == 3 && p[2] == anyNamespace:
				n.setsEverywhere[schema.GroupKind{Group: p[0], Kind: p[1]}] = true
			case len(p) == 3:
				n.sets[namespacedKind{schema.GroupKind{Group: p[0], Kind: p[1]}, p[2]}] = true
			case len(p) == 2 && p[0] == "*":
				n.wholeNamespaces[p[1]] = true
			}
		}
	}
	return n, true
}

// sweepWatches stops the source, kubeconfig and object set watches no
// ManifestSync of the cache may read that were last used before
// now-watchIdle, and returns how many it stopped. A failed list of the
// cache stops none.
func (r *Reconciler) sweepWatches(ctx context.Context, now time.Time) int {
	needed, ok := r.needed(ctx)
	if !ok {
		return 0
	}
	stopped := r.watches.sweep(ctx, needed, now)
	if r.sets != nil {
		stopped += r.sets.sweep(ctx, needed, now)
	}
	return stopped
}

// sweep stops the watches of the namespace caches needed does not keep,
// idle since before now-watchIdle.
func (w *watches) sweep(ctx context.Context, needed *neededWatches, now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	stopped := 0
	for key := range w.started {
		if needed.keeps(key) || now.Sub(w.used[key]) < watchIdle {
			continue
		}
		delete(w.started, key)
		delete(w.since, key)
		delete(w.used, key)
		stopped++
		c, ok := w.namespaces[key.namespace].(*namespaceCache)
		if !ok || w.informerInUse(key.gvk, key.namespace) {
			continue // the informer serves another purpose's watch too
		}
		// Under w.mu, so that no reconcile starts this watch again on the
		// informer being removed.
		if err := c.RemoveInformer(ctx, metadataProbe(key.gvk)); err != nil {
			w.log.Error(err, "removing an unused watch", "kind", key.gvk.String(), "namespace", key.namespace)
			continue
		}
		w.log.V(1).Info("stopped a watch no ManifestSync reads any more", "kind", key.gvk.String(), "namespace", key.namespace)
	}
	return stopped
}

// sweep stops the watches of the label-selected caches of object sets
// that needed does not keep, idle since before now-watchIdle.
func (s *objectSets) sweep(ctx context.Context, needed *neededWatches, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	stopped := 0
	for wk := range s.since {
		if needed.keepsSet(wk.gvk, wk.namespace) || now.Sub(s.used[wk]) < watchIdle {
			continue
		}
		delete(s.since, wk)
		delete(s.used, wk)
		stopped++
		if c := s.caches[wk.setCacheKey]; c != nil {
			// Under s.mu, as watch starts them.
			if err := c.RemoveInformer(ctx, metadataProbe(wk.gvk)); err != nil {
				s.log.Error(err, "removing an unused watch of object sets", "kind", wk.gvk.String(), "namespace", wk.namespace)
			}
		}
	}
	return stopped
}

// informerInUse says whether a started watch of any purpose reads the
// informer of kind gvk in namespace's cache. w.mu is held.
func (w *watches) informerInUse(gvk schema.GroupVersionKind, namespace string) bool {
	for key := range w.started {
		if key.gvk == gvk && key.namespace == namespace {
			return true
		}
	}
	return false
}
