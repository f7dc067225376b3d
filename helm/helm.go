// Package helm renders Helm charts as `helm template` does, with the Helm
// SDK (helm.sh/helm/v4): the renderer of helm sources and of the Starlark
// helm.template (stdlib.HelmRenderer). Template mode only: no release is
// stored and no cluster is asked. The template engine is never given a
// rest config, so `lookup` returns nothing, as in `helm template`, and
// .Capabilities are what the caller says (the operator: the target
// cluster's; the CLI: its flags or the defaults here).
//
// It is outside the offline core (engine/deps_test.go): Helm's chart and
// template packages import client-go, for capabilities and lookup, which
// the core must not. The core reaches it only through stdlib.HelmRenderer
// (engine.Options.Helm); cmd/engine and the operator wire it in. It must
// not import pkg/action (storage drivers, kubectl) nor anything that
// reaches a cluster.
package helm

import (
	"slices"
	"sync/atomic"

	"helm.sh/helm/v4/pkg/chart/common"

	"github.com/manifestsync/manifestsync/stdlib"
)

// DefaultKubeVersion is .Capabilities.KubeVersion when the caller gives
// none: a fixed recent version, so that an offline render does not change
// with the Helm SDK's or client-go's version.
const DefaultKubeVersion = "v1.37.0"

// MaxChartBytes bounds a chart's files (dependencies included, archives as
// they are), before anything is parsed: a chart is code and data read into
// memory at every render.
const MaxChartBytes = 16 << 20

// DefaultAPIVersions are .Capabilities.APIVersions when the caller gives
// none: the Helm SDK's, the group versions of client-go's scheme (as
// `helm template` without --api-versions). The slice is the caller's.
func DefaultAPIVersions() []string {
	return slices.Clone(common.DefaultVersionSet)
}

// CheckKubeVersion says whether v is a Kubernetes version Helm can take
// for .Capabilities.KubeVersion ("v1.37.0", "1.31").
func CheckKubeVersion(v string) error {
	_, err := common.ParseKubeVersion(v)
	return err
}

// Renderer renders charts with the Helm SDK; the zero value is ready. It
// is safe for concurrent use.
type Renderer struct{}

var _ stdlib.HelmRenderer = Renderer{}

// running counts renders abandoned at their deadline that have not ended
// yet; see Stuck.
var running atomic.Int64

// Stuck reports whether a render abandoned at its deadline still runs in
// this process. Go templates cannot be interrupted (a range over a large
// integer, an include that recurses on itself twice): RenderChart returns
// at the deadline, but the render's goroutine goes on. An evaluation
// worker asks after each evaluation and exits when one does, so that its
// parent starts a fresh one (engine/worker).
func Stuck() bool { return running.Load() > 0 }
