package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// ObjectReaderAs is the source.ObjectReader of the object and object set
// sources of ms that read this cluster, reading everything through reader
// alone (no cache, no watch): the web UI's evaluation passes its user's
// client, so that a source reads what that user may read. What a source
// holds is decided by the operator's own code (objectSource,
// objectSetSource): the same selection, the same allow-list (SharedWith:
// an object of another namespace only when it shares itself with ms's),
// the same errors, which name no object a namespaceSelector picked. The
// whole-namespace form reads the kinds dc discovers, as the operator's
// discovery does. Each call starts empty: nothing is remembered between
// evaluations. Sources of another cluster are not read by it (the caller
// refuses them).
func ObjectReaderAs(ms *v1alpha1.ManifestSync, reader client.Reader, dc discovery.DiscoveryInterface) source.ObjectReader {
	sc := &sourceCluster{
		object: func(context.Context, schema.GroupVersionKind, string) (client.Reader, error) { return reader, nil },
		set: func(context.Context, schema.GroupVersionKind, string, labels.Selector) (client.Reader, error) {
			return reader, nil
		},
		bodies:     func(*v1alpha1.ManifestSync) (client.Reader, error) { return reader, nil },
		namespaces: func(ctx context.Context) ([]engine.Namespace, error) { return Namespaces(ctx, reader) },
		kinds: func() ([]schema.GroupVersionKind, error) {
			if dc == nil {
				return nil, fmt.Errorf("discovery is not wired")
			}
			return namespacedKinds(memory.NewMemCacheClient(dc))
		},
		fail: func(err error) error { return err },
	}
	return &clusterObjects{ms: ms, sc: sc, st: &syncState{sources: map[objectRef]*engine.Snapshot{}}}
}
