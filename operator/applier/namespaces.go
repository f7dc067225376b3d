package applier

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
)

// Namespaces lists a cluster's live namespaces (not being deleted), by
// name, as the engine matches namespaceSelectors against them; the
// reconciler reads them from its metadata cache, engine diff from the API
// server.
func Namespaces(ctx context.Context, c client.Reader) ([]engine.Namespace, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	out := make([]engine.Namespace, 0, len(list.Items))
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil {
			out = append(out, engine.Namespace{Name: ns.Name, Labels: ns.Labels})
		}
	}
	slices.SortFunc(out, func(a, b engine.Namespace) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
