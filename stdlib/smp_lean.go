//go:build leanoperator

package stdlib

import (
	"fmt"

	"github.com/manifestsync/manifestsync/internal/lean"
)

// StrategicMerge refuses in the lean engine (internal/lean), which links
// none of kustomize: the operator sends every evaluation with a
// strategic-merge patch to its workers (engine.MayBeStrategicMerge), which
// apply it with kustomize's semantics as the full engine does.
func StrategicMerge(_, _ map[string]any) (map[string]any, error) {
	return nil, fmt.Errorf("strategic-merge patch: %w", lean.ErrNotLinked)
}
