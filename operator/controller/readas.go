package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
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
// evaluations. Sources of another cluster are read by RemoteReaderAs.
func ObjectReaderAs(ms *v1alpha1.ManifestSync, reader client.Reader, dc discovery.DiscoveryInterface) source.ObjectReader {
	return &clusterObjects{ms: ms, sc: readerCluster(reader, dc), st: &syncState{sources: map[objectRef]*engine.Snapshot{}}}
}

// readerCluster is a cluster read through reader alone, with the kinds dc
// discovers.
func readerCluster(reader client.Reader, dc discovery.DiscoveryInterface) *sourceCluster {
	return &sourceCluster{
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
}

// RemoteReaderAs is ObjectReaderAs for the sources of ms that read another
// cluster (cluster.kubeConfigSecretRef): the kubeconfig Secret is read
// through reader (the user's client: a user who may not read it is refused
// by the API server), and that cluster with the kubeconfig's credentials,
// which is what the user could do with the Secret themselves. The
// kubeconfig may not name files nor run a program (whatever
// --allow-kubeconfig-exec: a page view never runs a command a Secret
// names); each request ends after timeout; wrap bounds the remote
// cluster's reader as the caller bounds its own (nil: as it is). As in the
// operator, the credentials alone decide what the source may read there
// (the allow-list annotation governs this cluster only).
func RemoteReaderAs(ctx context.Context, ms *v1alpha1.ManifestSync, c *v1alpha1.ClusterRef, reader client.Reader, timeout time.Duration, wrap func(client.Reader) client.Reader) (source.ObjectReader, error) {
	ref := kubeConfigRefOf(ms, c)
	fail := func(err error) error { return fmt.Errorf("cluster %q: %w", ref.name, err) }
	remote, dc, err := remoteAs(ctx, ref, reader, timeout)
	if err != nil {
		return nil, fail(err)
	}
	var r client.Reader = remote
	if wrap != nil {
		r = wrap(r)
	}
	sc := readerCluster(r, dc)
	sc.ref, sc.fail = ref.name+"/"+ref.key, func(err error) error { return fail(err) }
	return &clusterObjects{ms: ms, sc: sc, st: &syncState{sources: map[objectRef]*engine.Snapshot{}}}, nil
}

// remoteAs is the client and discovery of the cluster of the kubeconfig
// Secret ref under the rules of a page view (ssa.RemoteAs).
func remoteAs(ctx context.Context, ref kubeConfigRef, reader client.Reader, timeout time.Duration) (client.Client, discovery.DiscoveryInterface, error) {
	return ssa.RemoteAs(ctx, ssa.KubeConfigRef{Namespace: ref.namespace, Name: ref.name, Key: ref.key}, reader, timeout)
}
