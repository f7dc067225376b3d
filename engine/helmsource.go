package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// HelmRenderer renders the charts of helm sources and of the Starlark
// helm.template; helm is the one made with the Helm SDK, which the
// core may not import (it imports client-go). The commands wire it in
// (Options.Helm).
type HelmRenderer = stdlib.HelmRenderer

// HelmCapabilities are a cluster's .Capabilities for charts: its
// Kubernetes version and API versions. Zero fields take the renderer's
// defaults.
type HelmCapabilities = stdlib.HelmCapabilities

// helmSource is a helm source of the spec: its chart, the values every
// target shares, and where its objects go among the inputs.
type helmSource struct {
	src  *v1alpha1.Source
	snap *Snapshot
	// values are valuesFrom in order, then helm.values, which win (as
	// Flux's values win over its valuesFrom, and Helm's --set over its -f
	// files); the params entry, if any, is nil Data, filled per target.
	values []stdlib.HelmValues
	params []bool // values[i] is the target's params
	// at is the index of e.objects before which its objects go: the
	// inputs keep the order of the spec's sources.
	at int
}

// helmSnapshots returns given with a snapshot for each helm source of the
// source form that has none with files: the chart directory of the
// source it names (the resolver gives one, with the chart's
// dependencies; tests and older callers may not), carrying the refs of
// the snapshot given for it, if any. Its revision is
// CHART@VERSION@sha256:DIGEST, as the resolver makes it.
func (e *evaluation) helmSnapshots(given map[string]*Snapshot) (map[string]*Snapshot, error) {
	var out map[string]*Snapshot
	for _, s := range e.spec.Sources {
		h := s.Helm
		if h == nil || h.Source == "" {
			continue
		}
		g := given[s.Name]
		if g != nil && g.Files != nil {
			continue
		}
		base := given[h.Source]
		if base == nil {
			return nil, fmt.Errorf("source %q: chart source %q has no snapshot", s.Name, h.Source)
		}
		sub, err := base.Sub(h.Path)
		if err != nil {
			return nil, fmt.Errorf("source %q: chart source %q: %w", s.Name, h.Source, err)
		}
		snap := *sub
		if base.Origin != "" {
			snap.Origin = path.Join(base.Origin, path.Clean(h.Path))
		}
		var meta struct{ Name, Version string }
		if err := yaml.Unmarshal(snap.Files["Chart.yaml"], &meta); err != nil || meta.Name == "" {
			return nil, fmt.Errorf("source %q: %s: no chart there (a Chart.yaml with a name)", s.Name, base.FileName(h.Source, path.Join(h.Path, "Chart.yaml")))
		}
		snap.Revision = meta.Name + "@" + meta.Version + "@" + ContentDigest(snap.Files)
		if g != nil {
			snap.Refs = g.Refs
			snap.Revision = g.Revision + "@" + snap.Revision
		}
		if out == nil {
			out = make(map[string]*Snapshot, len(given)+1)
			for k, v := range given {
				out[k] = v
			}
		}
		out[s.Name] = &snap
	}
	if out == nil {
		return given, nil
	}
	return out, nil
}

// chartSources are the sources that hold the chart or a values file of a
// helm source: like the base of a kustomize source, they contribute only
// through it (their templates and values files are not objects), as an
// Argo CD source named only by ref ($values/...) contributes nothing.
func chartSources(spec *v1alpha1.ManifestSyncSpec) map[string]bool {
	out := map[string]bool{}
	for _, s := range spec.Sources {
		if s.Helm == nil {
			continue
		}
		if s.Helm.Source != "" {
			out[s.Helm.Source] = true
		}
		for _, v := range s.Helm.ValuesFrom {
			if v.Source != "" && v.Source != s.Name {
				out[v.Source] = true
			}
		}
	}
	return out
}

// addHelmSource records helm source s, whose objects go before e.objects[at],
// with the values every target shares read from the snapshots: each
// valuesFrom in order, then helm.values, the last one winning.
func (e *evaluation) addHelmSource(s *v1alpha1.Source, at int) error {
	h := &helmSource{src: s, snap: e.snaps[s.Name], at: at}
	for i, ref := range s.Helm.ValuesFrom {
		v, ok, err := e.valuesFrom(h.snap, ref)
		if err != nil {
			return fmt.Errorf("source %q: helm.valuesFrom[%d]: %w", s.Name, i, err)
		}
		if ok {
			h.values = append(h.values, v)
			h.params = append(h.params, ref.Params)
		}
	}
	if v := s.Helm.Values; v != nil && len(v.Raw) > 0 && string(v.Raw) != "null" {
		h.values = append(h.values, stdlib.HelmValues{Name: "helm.values", Data: v.Raw})
		h.params = append(h.params, false)
	}
	e.helm = append(e.helm, h)
	return nil
}

// valuesFrom reads one valuesFrom entry; ok is false for an optional one
// that is missing. The values of a Secret are taught to the redactor,
// each string on its own, so that a template error quoting one shows
// "***".
func (e *evaluation) valuesFrom(snap *Snapshot, ref v1alpha1.HelmValuesReference) (stdlib.HelmValues, bool, error) {
	switch {
	case ref.Params:
		return stdlib.HelmValues{Name: "params"}, true, nil
	case ref.Source != "":
		other := e.snaps[ref.Source]
		name := fileName(e.snaps, ref.Source, ref.Path)
		if other == nil {
			return stdlib.HelmValues{}, false, fmt.Errorf("source %q has no snapshot", ref.Source)
		}
		data, err := other.ReadFile(path.Clean(ref.Path))
		if errors.Is(err, fs.ErrNotExist) && ref.Optional {
			return stdlib.HelmValues{}, false, nil
		}
		if err != nil {
			return stdlib.HelmValues{}, false, fmt.Errorf("%s: no such file", name)
		}
		return stdlib.HelmValues{Name: name, Data: data, TargetPath: ref.TargetPath}, true, nil
	}
	key := ref.ValuesKey
	if key == "" {
		key = "values.yaml"
	}
	obj := ref.Kind + "/" + ref.Name
	data, found := snap.Refs[obj]
	if !found {
		if ref.Optional {
			return stdlib.HelmValues{}, false, nil
		}
		return stdlib.HelmValues{}, false, fmt.Errorf("%s not found", obj)
	}
	v, found := data[key]
	if !found {
		if ref.Optional {
			return stdlib.HelmValues{}, false, nil
		}
		return stdlib.HelmValues{}, false, fmt.Errorf("%s has no key %q", obj, key)
	}
	secret := ref.Kind == "Secret"
	if secret {
		e.red.Add(v)
		if docs, err := DecodeDocuments([]byte(v)); err == nil {
			for _, d := range docs {
				addStrings(e.red.Add, d.Value)
			}
		}
	}
	return stdlib.HelmValues{Name: fmt.Sprintf("%s key %s", obj, key), Data: []byte(v), TargetPath: ref.TargetPath, Sensitive: secret}, true, nil
}

// addStrings calls add with every string in v.
func addStrings(add func(...string), v any) {
	switch v := v.(type) {
	case string:
		add(v)
	case map[string]any:
		for k, e := range v {
			add(k)
			addStrings(add, e)
		}
	case []any:
		for _, e := range v {
			addStrings(add, e)
		}
	}
}

// targetInputs are the inputs of target t: e.objects, with the objects
// each helm source renders for t in its place. Without helm sources they
// are e.objects itself, shared by every target.
func (e *evaluation) targetInputs(ctx context.Context, t target) ([]Input, error) {
	if len(e.helm) == 0 {
		return e.objects, nil
	}
	var out []Input
	prev := 0
	for _, h := range e.helm {
		out = append(out, e.objects[prev:h.at]...)
		objs, err := e.render(ctx, h, t)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
		prev = h.at
	}
	return append(out, e.objects[prev:]...), nil
}

// capabilities are the .Capabilities of t's cluster.
func (e *evaluation) capabilities(t *v1alpha1.Target) HelmCapabilities {
	if t.Cluster != nil {
		if c, ok := e.opts.ClusterCapabilities[ClusterID(t.Cluster)]; ok {
			return c
		}
	}
	return e.opts.Capabilities
}

// render renders helm source h for target t: release helm.releaseName or
// the ManifestSync's name, namespace helm.namespace or the target's, the
// values in order (valuesFrom with the target's params, then
// helm.values), within the evaluation's time and size limits.
func (e *evaluation) render(ctx context.Context, h *helmSource, t target) ([]Input, error) {
	name := h.src.Name
	if e.opts.Helm == nil {
		return nil, fmt.Errorf("source %q: no chart renderer in this evaluation", name)
	}
	hs := h.src.Helm
	release := hs.ReleaseName
	if release == "" {
		release = e.name
	}
	if release == "" {
		release = name
	}
	ns := hs.Namespace
	if ns == "" {
		ns = t.namespace
	}
	if ns == "" {
		ns = "default"
	}
	values := make([]stdlib.HelmValues, len(h.values))
	copy(values, h.values)
	for i, p := range h.params {
		if p {
			data, err := json.Marshal(t.params.m)
			if err != nil {
				return nil, fmt.Errorf("source %q: params: %w", name, err)
			}
			values[i].Data = data
		}
	}
	limits := e.opts.Limits.WithDefaults()
	rctx, cancel := context.WithTimeout(ctx, limits.Timeout)
	defer cancel()
	manifests, err := e.opts.Helm.RenderChart(rctx, stdlib.HelmChart{
		Name:         name,
		Files:        h.snap.Files,
		Values:       values,
		Release:      release,
		Namespace:    ns,
		IncludeCRDs:  hs.IncludeCRDs == nil || *hs.IncludeCRDs,
		Capabilities: e.capabilities(t.spec),
		MaxBytes:     limits.MaxBytes,
	})
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		// The evaluation's timeout, as a script's: the CLI says which flag.
		return nil, fmt.Errorf("source %q: rendering the chart: %w", name, &lstar.LimitError{Limit: lstar.LimitTimeout, Value: limits.Timeout.String(), Err: err})
	}
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", name, err)
	}
	var out []Input
	for _, m := range manifests {
		docs, err := DecodeDocuments(m.Content)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", name, FileError(m.Name, err))
		}
		for _, d := range docs {
			obj, ok := d.Value.(map[string]any)
			if d.Value == nil {
				continue
			}
			if !ok || !isObject(obj) {
				return nil, fmt.Errorf("source %q: %s:%d: not an object with apiVersion and kind", name, m.Name, d.Line)
			}
			if items, ok := obj["items"].([]any); ok && strings.HasSuffix(obj["kind"].(string), "List") {
				for i, it := range items {
					im, ok := it.(map[string]any)
					if !ok || !isObject(im) {
						return nil, fmt.Errorf("source %q: %s:%d: items[%d] is not an object with apiVersion and kind", name, m.Name, d.Line, i)
					}
					e.red.AddObject(im)
					out = append(out, Input{Source: name, Path: m.Name, Line: d.Line, Object: im})
				}
				continue
			}
			e.red.AddObject(obj)
			out = append(out, Input{Source: name, Path: m.Name, Line: d.Line, Object: obj})
		}
	}
	return out, nil
}

// targetCtx are ctx.inputs and ctx.sources for a target whose inputs are
// its own (a spec with helm sources): the inputs, and the sources with
// each helm source's objects() those rendered for the target. Without
// helm sources both are the frozen values every target shares.
func (e *evaluation) targetCtx(inputs []Input) (starlark.Value, starlark.Value, error) {
	if len(e.helm) == 0 {
		return e.ctxInputs, e.ctxSource, nil
	}
	in, err := frozenInputs(inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("ctx.inputs: %w", err)
	}
	shared := e.ctxSource.(*sourcesDict).d
	d := starlark.NewDict(shared.Len())
	for _, kv := range shared.Items() {
		_ = d.SetKey(kv[0], kv[1])
	}
	for _, h := range e.helm {
		var rendered []Input
		for _, i := range inputs {
			if i.Source == h.src.Name {
				rendered = append(rendered, i)
			}
		}
		objs, err := frozenInputs(rendered)
		if err != nil {
			return nil, nil, fmt.Errorf("ctx.sources[%q]: %w", h.src.Name, err)
		}
		old, _, _ := shared.Get(starlark.String(h.src.Name))
		fields := starlark.StringDict{}
		old.(*starlarkstruct.Struct).ToStringDict(fields)
		fields["objects"] = renderedObjects(objs, rendered)
		_ = d.SetKey(starlark.String(h.src.Name), starlarkstruct.FromStringDict(starlark.String("source"), fields))
	}
	d.Freeze()
	return in, &sourcesDict{d}, nil
}

// renderedObjects is objects(glob="**") of a helm source: the objects
// rendered for the target from the templates whose path (CHART/templates/
// NAME.yaml) matches glob.
func renderedObjects(all starlark.Value, inputs []Input) *starlark.Builtin {
	return starlark.NewBuiltin("objects", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		glob := "**"
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "glob?", &glob); err != nil {
			return nil, err
		}
		if glob == "**" || glob == "" {
			return all, nil
		}
		if _, err := path.Match(glob, ""); err != nil {
			return nil, fmt.Errorf("%s: glob %q: %w", b.Name(), glob, err)
		}
		var sel []Input
		for _, in := range inputs {
			if globMatch(glob, in.Path) {
				sel = append(sel, in)
			}
		}
		return frozenInputs(sel)
	})
}
