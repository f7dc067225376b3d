//go:build leanoperator

package kustomize

import (
	"fmt"
	"path"

	"github.com/manifestsync/manifestsync/internal/lean"
)

// Build refuses in the lean operator (internal/lean), which links no
// kustomize: its evaluation workers build kustomizations.
func Build(_ map[string][]byte, dir string) ([]byte, error) {
	return nil, fmt.Errorf("kustomize build %s: %w", path.Clean(dir), lean.ErrNotLinked)
}
