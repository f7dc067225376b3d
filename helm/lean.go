//go:build leanoperator

package helm

import (
	"context"
	"fmt"

	"github.com/manifestsync/manifestsync/internal/lean"
	"github.com/manifestsync/manifestsync/stdlib"
)

// RenderChart refuses in the lean operator (internal/lean), which links
// no template engine: its evaluation workers render charts.
func (Renderer) RenderChart(_ context.Context, c stdlib.HelmChart) ([]stdlib.HelmManifest, error) {
	return nil, fmt.Errorf("chart %q: %w", c.Name, lean.ErrNotLinked)
}
