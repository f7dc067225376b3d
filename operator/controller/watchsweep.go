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

// Watches let go of. The watches of a namespace's sources and kubeconfig
// Secrets (watches.inNamespace) start at a ManifestSync's first use; one
// no ManifestSync of the operator's cache reads any more (deleted, its
// sources changed, or, under --shards auto, moved to another replica) is
// stopped and its informer removed by the sweep, so that a replica's
// memory follows its share and not every namespace it ever synced. A
// watch is kept while a ManifestSync of the cache names it (index keys
// of sourceIndexKeys and kubeConfigKeys), and for watchIdle after its
// last use, so that a ManifestSync its cache does not show yet (just
// created, or moved here) keeps the watch its reconcile started. One
// stopped and needed again is started again by the next reconcile that
// reads it; until then its reads go to the API server (namespaceCache).
// Object sets' caches and the managed cache's kinds are not swept.
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

// sweepWatches stops the source and kubeconfig watches no ManifestSync of
// the cache names that were last used before now-watchIdle, and returns
// how many it stopped. A failed list of the cache stops none.
func (r *Reconciler) sweepWatches(ctx context.Context, now time.Time) int {
	w := r.watches
	var list v1alpha1.ManifestSyncList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0
	}
	needed := map[watchPurpose]map[namespacedKind]bool{watchSources: {}, watchKubeConfigs: {}}
	secret := schema.GroupKind{Kind: "Secret"}
	for i := range list.Items {
		ms := &list.Items[i]
		for _, key := range sourceIndexKeys(ms) {
			// group/Kind/namespace/name
			if p := strings.SplitN(key, "/", 4); len(p) == 4 {
				needed[watchSources][namespacedKind{schema.GroupKind{Group: p[0], Kind: p[1]}, p[2]}] = true
			}
		}
		for _, key := range kubeConfigKeys(ms) {
			if ns, _, ok := strings.Cut(key, "/"); ok {
				needed[watchKubeConfigs][namespacedKind{secret, ns}] = true
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	stopped := 0
	for key := range w.started {
		keep, swept := needed[key.purpose]
		if !swept || keep[namespacedKind{key.gvk.GroupKind(), key.namespace}] || now.Sub(w.used[key]) < watchIdle {
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
