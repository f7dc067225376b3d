package controller

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/httpsrc"
)

// NewHTTPCache returns the operator's cache of http sources (see
// httpsrc.Cache); a zero opts.Wait is GitWait, as NewOCICache's.
func NewHTTPCache(opts httpsrc.CacheOptions) *httpsrc.Cache {
	if opts.Wait <= 0 {
		opts.Wait = GitWait
	}
	return httpsrc.NewCache(opts)
}

// HTTPSweeper returns the runnable that, every period, lets go of the
// last archives of the http sources no ManifestSync has any more (read
// from reader, the manager's cache).
func HTTPSweeper(c *httpsrc.Cache, reader client.Reader, period time.Duration) manager.Runnable {
	return sweeper(reader, period, func(list *v1alpha1.ManifestSyncList) {
		var sources []v1alpha1.HTTPSource
		for _, ms := range list.Items {
			for _, src := range ms.Spec.Sources {
				if src.HTTP != nil {
					sources = append(sources, *src.HTTP)
				}
			}
		}
		c.Keep(sources)
	})
}
