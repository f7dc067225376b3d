package stdlib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// HelmRenderer renders a Helm chart as `helm template` does. The Helm SDK
// it is made with imports client-go, which the offline core may not, so
// the core declares what it needs here and the commands (cmd/engine: eval,
// vet, diff, the evaluation workers, the operator) hand it the real one,
// package helm. It must be safe for concurrent use.
type HelmRenderer interface {
	// RenderChart renders c. A render that outlives ctx is abandoned with
	// ctx's error. Its errors name the chart and the template, file and
	// line; they never quote values from a sensitive HelmValues.
	RenderChart(ctx context.Context, c HelmChart) ([]HelmManifest, error)
}

// HelmChart is one render: a chart directory, the values given to it and
// the release and cluster it is rendered for.
type HelmChart struct {
	// Name names the chart in messages (the source, or the directory a
	// script gave).
	Name string
	// Files are the chart's directory: Chart.yaml at its root, its
	// dependencies under charts/ as directories or .tgz archives.
	Files map[string][]byte
	// Values are merged in order over the chart's values.yaml, a later one
	// winning, as `helm template -f a.yaml -f b.yaml` merges them.
	Values []HelmValues
	// Release and Namespace are .Release.Name and .Release.Namespace.
	Release, Namespace string
	// IncludeCRDs renders the crds/ directories of the chart and its
	// dependencies, first.
	IncludeCRDs bool
	// Capabilities are the cluster's, for .Capabilities.
	Capabilities HelmCapabilities
	// MaxBytes bounds the rendered output; zero means no bound.
	MaxBytes int64
}

// HelmValues is one set of values, in YAML (or JSON).
type HelmValues struct {
	// Name says where they come from in messages ("helm.values",
	// "ConfigMap/app key values.yaml", a file).
	Name string
	// Data is a YAML stream of maps, merged as Helm merges a values file;
	// with TargetPath, the string put at that path.
	Data []byte
	// TargetPath, when set, puts Data as one string at this dotted path,
	// as Flux's valuesFrom targetPath (Helm's --set-string syntax).
	TargetPath string
	// Sensitive values (from a Secret) never show in an error: a parse
	// error says only the line.
	Sensitive bool
}

// HelmCapabilities are .Capabilities: the cluster's version and API group
// versions. Zero fields take the renderer's defaults.
type HelmCapabilities struct {
	// KubeVersion is the Kubernetes version, "v1.37.0".
	KubeVersion string `json:"kubeVersion,omitempty"`
	// APIVersions are the API group versions ("apps/v1") and, as Helm
	// asks a cluster, group versions with a kind ("apps/v1/Deployment").
	APIVersions []string `json:"apiVersions,omitempty"`
	// Unknown, when set, says why the cluster's capabilities could not be
	// read (a remote cluster that does not answer): a render for it fails
	// with that reason, while the targets that render no chart go on.
	Unknown string `json:"unknown,omitempty"`
}

// HelmManifest is one rendered template, or one file of a crds/ directory.
type HelmManifest struct {
	// Name is the template's path, "mychart/templates/app.yaml".
	Name string
	// Content is its YAML: any number of documents.
	Content []byte
}

type helmKey struct{}

type helmValue struct {
	r        HelmRenderer
	caps     HelmCapabilities
	maxBytes int64
}

// WithHelm returns a context that carries the chart renderer, the
// target's capabilities and the bound of a render's output (the
// evaluation's size limit), for helm.template, which reads them through
// lstar.ContextOf(thread).
func WithHelm(ctx context.Context, r HelmRenderer, caps HelmCapabilities, maxBytes int64) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, helmKey{}, helmValue{r, caps, maxBytes})
}

// helmFrom returns what WithHelm put in ctx; r is nil when nothing was.
func helmFrom(ctx context.Context) helmValue {
	v, _ := ctx.Value(helmKey{}).(helmValue)
	return v
}

// Helm is the Starlark module helm.
//
//	helm.template(chart_dir, values=None, release="release-name",
//	              namespace="default", include_crds=True) -> list
var Helm = &starlarkstruct.Module{
	Name: "helm",
	Members: starlark.StringDict{
		"template": newBuiltin("helm.template", helmTemplate),
	},
}

var helmModule = Module{
	Name:  "helm",
	Doc:   "Renders a Helm chart of a source snapshot as `helm template` does (the Helm SDK, template mode: no cluster is asked, `lookup` returns nothing): what a helm source does, from a script, so that it can render a chart with values it computes or post-process the objects.",
	Value: Helm,
	Funcs: []Func{
		{"template", `helm.template(chart_dir, values=None, release="release-name", namespace="default", include_crds=True) -> list`, `Renders the chart in the directory chart_dir (resolved as load() resolves modules: "charts/app" next to the calling file, "//charts/app" at the root of its source, "@repo//charts/app" in source repo; its dependencies vendored under charts/) with values (a dict merged over the chart's values.yaml, as helm template -f merges a file) and returns its objects as dicts: the crds/ files first (unless include_crds is False), then the templates in Helm's install order, hooks last with their annotations; NOTES.txt, partials and empty documents are left out. .Capabilities are the target cluster's (the operator) or the command's --kube-version and --api-versions. The render runs under the evaluation's deadline and its output counts against the transform's size limit; a template error names the chart, template file and line.`},
	},
}

func helmTemplate(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		dir         string
		values      starlark.Value = starlark.None
		release                    = "release-name"
		namespace                  = "default"
		includeCRDs                = true
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "chart_dir", &dir, "values?", &values, "release?", &release, "namespace?", &namespace, "include_crds?", &includeCRDs); err != nil {
		return nil, err
	}
	ctx := lstar.ContextOf(thread)
	h := helmFrom(ctx)
	if h.r == nil {
		return nil, errors.New("no chart renderer in this evaluation")
	}
	tree, source, clean, err := lstar.ResolveTree(thread, dir)
	if err != nil {
		return nil, err
	}
	files := chartFiles(tree, clean)
	if len(files) == 0 {
		return nil, fmt.Errorf("chart_dir %q: no files there", dir)
	}
	c := HelmChart{
		Name:         lstar.DisplayName(ctx, source, clean),
		Files:        files,
		Release:      release,
		Namespace:    namespace,
		IncludeCRDs:  includeCRDs,
		Capabilities: h.caps,
		MaxBytes:     h.maxBytes,
	}
	if values != starlark.None {
		v, err := lstar.FromValue(values)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		if _, ok := v.(map[string]any); !ok {
			return nil, fmt.Errorf("values: got %s, want dict", values.Type())
		}
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		c.Values = []HelmValues{{Name: "values", Data: data}}
	}
	manifests, err := h.r.RenderChart(ctx, c)
	if err != nil {
		return nil, err
	}
	var objs []any
	for _, m := range manifests {
		docs, err := decodeYAMLStream(m.Content)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		for _, d := range docs {
			if d != nil {
				objs = append(objs, d)
			}
		}
	}
	return lstar.ToValue(objs)
}

// chartFiles are the files of tree under dir, with paths relative to it.
func chartFiles(tree map[string][]byte, dir string) map[string][]byte {
	if dir == "." {
		return tree
	}
	prefix := path.Clean(dir) + "/"
	out := map[string][]byte{}
	for p, b := range tree {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			out[rest] = b
		}
	}
	return out
}
