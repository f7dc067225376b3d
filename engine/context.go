package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

var errNotExist = fs.ErrNotExist

// ctxValue builds the ctx a transform's main receives:
//
//	ctx.target  -> struct(name, namespace, cluster, labels)
//	ctx.params  -> dict: spec.params merged with the target's params
//	ctx.inputs  -> list of objects
//	ctx.sources -> name -> struct(name, revision, files, read, objects, object),
//	               indexed (ctx.sources["app"]) or as attributes (ctx.sources.app)
//	               (objects is a list for an object set source)
//
// inputs and sources are built once and frozen, so every target shares
// them, but with helm sources, whose objects are the target's own
// (targetCtx).
func (e *evaluation) ctxValue(t target, inputs []Input) (starlark.Value, error) {
	ctxInputs, ctxSources, err := e.targetCtx(inputs)
	if err != nil {
		return nil, err
	}
	params, err := t.params.starlark()
	if err != nil {
		return nil, fmt.Errorf("ctx.params: %w", err)
	}
	lbls, err := lstar.ToValue(t.spec.Labels)
	if err != nil {
		return nil, fmt.Errorf("ctx.target.labels: %w", err)
	}
	if t.spec.Labels == nil {
		lbls = starlark.NewDict(0)
	}
	tgt := starlarkstruct.FromStringDict(starlark.String("target"), starlark.StringDict{
		"name":      starlark.String(t.spec.Name),
		"namespace": starlark.String(t.namespace),
		"cluster":   starlark.String(clusterName(t.spec)),
		"labels":    lbls,
	})
	c := starlarkstruct.FromStringDict(starlark.String("ctx"), starlark.StringDict{
		"target":  tgt,
		"params":  params,
		"inputs":  ctxInputs,
		"sources": ctxSources,
	})
	c.Freeze()
	return c, nil
}

func frozenInputs(objs []Input) (starlark.Value, error) {
	elems := make([]starlark.Value, len(objs))
	for i, in := range objs {
		v, err := lstar.ToValue(in.Object)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", in.Source, in.Path, err)
		}
		elems[i] = v
	}
	l := starlark.NewList(elems)
	l.Freeze()
	return l, nil
}

// sourcesValue exposes each source's snapshot to scripts.
func sourcesValue(spec *v1alpha1.ManifestSyncSpec, snaps map[string]*Snapshot) starlark.Value {
	d := starlark.NewDict(len(spec.Sources))
	for _, s := range spec.Sources {
		sv := &sourceValue{name: s.Name, snap: snaps[s.Name]}
		fields := starlark.StringDict{
			"name":     starlark.String(s.Name),
			"revision": starlark.String(sv.snap.Revision),
			"files":    starlark.NewBuiltin("files", sv.files),
			"read":     starlark.NewBuiltin("read", sv.read),
			"objects":  starlark.NewBuiltin("objects", sv.objects),
			"object":   starlark.None,
		}
		if sv.snap.Object != nil {
			if o, err := lstar.ToValue(sv.snap.Object); err == nil {
				fields["object"] = o
			}
		}
		if s.Objects != nil {
			// An object set's objects are a list, not a function of a glob.
			if l, err := frozenInputs(setInputs(s.Name, sv.snap)); err == nil {
				fields["objects"] = l
			}
		}
		_ = d.SetKey(starlark.String(s.Name), starlarkstruct.FromStringDict(starlark.String("source"), fields))
	}
	d.Freeze()
	return &sourcesDict{d}
}

// sourcesDict is ctx.sources: a frozen dict of the sources by name, whose
// sources are attributes too (ctx.sources.app as ctx.sources["app"]) when
// their name is an identifier. The dict's methods (get, keys, items,
// values) win over a source of the same name, which indexing still reads.
type sourcesDict struct{ d *starlark.Dict }

var (
	_ starlark.IterableMapping = (*sourcesDict)(nil)
	_ starlark.HasAttrs        = (*sourcesDict)(nil)
	_ starlark.Sequence        = (*sourcesDict)(nil)
)

func (s *sourcesDict) String() string        { return s.d.String() }
func (s *sourcesDict) Type() string          { return "sources" }
func (s *sourcesDict) Freeze()               {}
func (s *sourcesDict) Truth() starlark.Bool  { return s.d.Truth() }
func (s *sourcesDict) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable type: sources") }
func (s *sourcesDict) Len() int              { return s.d.Len() }
func (s *sourcesDict) Iterate() starlark.Iterator {
	return s.d.Iterate()
}
func (s *sourcesDict) Items() []starlark.Tuple { return s.d.Items() }
func (s *sourcesDict) Get(k starlark.Value) (starlark.Value, bool, error) {
	return s.d.Get(k)
}

// Attr is a method of the dict, else the source of that name.
func (s *sourcesDict) Attr(name string) (starlark.Value, error) {
	if v, err := s.d.Attr(name); v != nil || err != nil {
		return v, err
	}
	v, found, err := s.d.Get(starlark.String(name))
	if err != nil || !found {
		return nil, err // nil, nil: "sources has no .name field or method"
	}
	return v, nil
}

func (s *sourcesDict) AttrNames() []string {
	names := s.d.AttrNames()
	for _, k := range s.d.Keys() {
		names = append(names, string(k.(starlark.String)))
	}
	return names
}

// sourceValue backs the functions of ctx.sources[name]. Parsed objects are
// cached, since every target may ask for them.
type sourceValue struct {
	name string
	snap *Snapshot

	mu     sync.Mutex
	parsed map[string]starlark.Value // objects(glob), by glob
}

// files(glob="**") -> list of paths
func (s *sourceValue) files(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	glob := "**"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "glob?", &glob); err != nil {
		return nil, err
	}
	paths, err := s.snap.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	return lstar.ToValue(paths)
}

// read(path) -> string
func (s *sourceValue) read(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var p string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "path", &p); err != nil {
		return nil, err
	}
	data, err := s.snap.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no file %q in source %q", b.Name(), p, s.name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	return starlark.String(data), nil
}

// objects(glob="**") -> list of objects in the YAML and JSON files that match
func (s *sourceValue) objects(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	glob := "**"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "glob?", &glob); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.parsed[glob]; ok {
		return v, nil
	}
	var objs []Input
	if s.snap.Object != nil {
		objs = []Input{{Source: s.name, Object: s.snap.Object}}
	} else {
		paths, err := s.snap.Glob(glob)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name(), err)
		}
		if objs, err = objectsOf(s.name, s.snap, paths); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Name(), err)
		}
	}
	v, err := frozenInputs(objs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	if s.parsed == nil {
		s.parsed = map[string]starlark.Value{}
	}
	s.parsed[glob] = v
	return v, nil
}
