package controller

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/helm/charts"
)

// HelmProvider makes the helm provider of one reconcile from the
// credentials of its ManifestSync (see helmCredentials). `engine operator`
// runs the Provider of a HelmCache.
type HelmProvider func(creds charts.Credentials) source.HelmFetcher

// HelmCache is the operator's one charts.Fetcher: repository indexes and
// chart archives, bounded in bytes (charts.Options.MaxCacheBytes, the
// --helm-cache-max-size flag), so that a thousand ManifestSyncs of one
// chart download it once, and an unchanged repository costs one request
// answered 304 per poll.
type HelmCache struct {
	Fetcher *charts.Fetcher
}

// NewHelmCache returns the cache opts describe; a zero opts.Wait is
// GitWait: a fetch slower than that goes on in the background and wakes
// its ManifestSync when it ends (wakeAfterFetch), as git fetches do.
func NewHelmCache(opts charts.Options) *HelmCache {
	if opts.Wait <= 0 {
		opts.Wait = GitWait
	}
	return &HelmCache{Fetcher: charts.New(opts)}
}

// Provider is the HelmProvider of the cache.
func (c *HelmCache) Provider(creds charts.Credentials) source.HelmFetcher {
	return charts.Provider{Fetcher: c.Fetcher, Credentials: creds}
}

// Sweeper returns the runnable that, every period, lets go of the last
// snapshots of the helm sources no ManifestSync has any more (read from
// reader, the manager's cache); the archives themselves are bounded by
// the cache's size.
func (c *HelmCache) Sweeper(reader client.Reader, period time.Duration) manager.Runnable {
	return sweeper(reader, period, func(list *v1alpha1.ManifestSyncList) {
		var sources []v1alpha1.HelmSource
		for _, ms := range list.Items {
			for _, src := range ms.Spec.Sources {
				if src.Helm != nil {
					sources = append(sources, *src.Helm)
				}
			}
		}
		c.Fetcher.Keep(sources)
	})
}

// helmCredentials reads the Secret a helm source's secretRef names as
// gitCredentials does: in ms's namespace, as ms's service account,
// uncached.
func (r *Reconciler) helmCredentials(ms *v1alpha1.ManifestSync) charts.Credentials {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*charts.Auth, error) {
		data, err := r.secretData(ctx, ms, ref)
		if err != nil {
			return nil, err
		}
		return charts.FromSecretData(data), nil
	}
}
