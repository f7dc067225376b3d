package webhook

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// NewSyncCache makes the Receiver's cache of every ManifestSync sel
// selects (Receiver.Syncs), for a replica of --shards auto: calls are
// routed to whichever replica, and each replica's own cache holds only
// its share. It keeps of each ManifestSync its name, namespace, UID,
// resourceVersion and SecretAnnotation (a few hundred bytes each, and
// nothing a user wrote beyond that annotation), so that a call makes no
// API request before its signature is checked, whichever replica it
// reaches. The manager starts it with its own caches.
func NewSyncCache(mgr manager.Manager, newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer, sel labels.Selector) (client.Reader, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:  mgr.GetHTTPClient(),
		Scheme:      mgr.GetScheme(),
		Mapper:      mgr.GetRESTMapper(),
		NewInformer: newInformer,
		ByObject:    map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Label: sel, Transform: keepRoute}},
	})
	if err != nil {
		return nil, fmt.Errorf("the webhook's cache of ManifestSyncs: %w", err)
	}
	if _, err := c.GetInformer(context.Background(), &v1alpha1.ManifestSync{}, cache.BlockUntilSynced(false)); err != nil {
		return nil, fmt.Errorf("the webhook's watch of ManifestSyncs: %w", err)
	}
	if err := mgr.Add(cacheRunnable{c}); err != nil {
		return nil, err
	}
	return c, nil
}

// keepRoute keeps of a ManifestSync what the Receiver reads.
func keepRoute(obj any) (any, error) {
	ms, ok := obj.(*v1alpha1.ManifestSync)
	if !ok {
		return obj, nil
	}
	out := &v1alpha1.ManifestSync{TypeMeta: ms.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: ms.Name, Namespace: ms.Namespace, UID: ms.UID, ResourceVersion: ms.ResourceVersion,
	}}
	if secret, ok := ms.Annotations[SecretAnnotation]; ok {
		out.Annotations = map[string]string{SecretAnnotation: secret}
	}
	return out, nil
}
