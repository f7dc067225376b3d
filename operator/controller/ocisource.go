package controller

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/oci"
)

// NewOCICache returns the operator's cache of oci sources (see
// oci.Cache); a zero opts.Wait is GitWait: a registry slower than that is
// read on in the background and wakes its ManifestSync when it ends
// (wakeAfterFetch), as git fetches do.
func NewOCICache(opts oci.CacheOptions) *oci.Cache {
	if opts.Wait <= 0 {
		opts.Wait = GitWait
	}
	return oci.NewCache(opts)
}

// OCISweeper returns the runnable that, every period, lets go of the last
// artifacts of the oci sources no ManifestSync has any more (read from
// reader, the manager's cache).
func OCISweeper(c *oci.Cache, reader client.Reader, period time.Duration) manager.Runnable {
	return sweeper(reader, period, func(list *v1alpha1.ManifestSyncList) {
		var sources []v1alpha1.OCISource
		for _, ms := range list.Items {
			for _, src := range ms.Spec.Sources {
				if src.OCI != nil {
					sources = append(sources, *src.OCI)
				}
			}
		}
		c.Keep(sources)
	})
}
