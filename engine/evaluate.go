package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.starlark.net/starlark"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// Options configure an evaluation. The zero value is usable: default
// limits, the built-in scope table, every target.
type Options struct {
	// Limits bound the transform; zero fields take their defaults.
	Limits lstar.Limits
	// Scope tells namespaced kinds from cluster-scoped ones.
	Scope Scope
	// Targets, when not empty, restricts the evaluation to these target names.
	Targets []string
	// Namespaces are the cluster's namespaces, for namespaceSelector
	// targets. Offline there are none, and such targets are errors.
	Namespaces []Namespace
	// ClusterNamespaces are the namespaces of remote clusters, by
	// ClusterID, for their namespaceSelector targets. Nil, Namespaces
	// serve the targets of every cluster (the CLI is given one list).
	ClusterNamespaces map[string][]Namespace
	// Workers is how many targets are evaluated at once; default GOMAXPROCS.
	Workers int
	// Compact keeps no objects of the targets that are the inputs
	// themselves (no transform, patch or schema): their Objects and
	// Digests are nil, Manifests makes the objects again when asked and
	// WithManifests the digests too. A fan-out of 20 inputs to 1,000
	// namespaces then holds 20 objects, not 20,000, and a digest per
	// target, for as long as the result is kept (the operator keeps it
	// between syncs).
	Compact bool
	// Helm renders the charts of helm sources and of helm.template; nil
	// fails them. The commands give helm's.
	Helm HelmRenderer
	// Capabilities are the cluster's, for charts; ClusterCapabilities
	// are those of remote clusters, by ClusterID (a cluster without an
	// entry takes Capabilities).
	Capabilities        HelmCapabilities
	ClusterCapabilities map[string]HelmCapabilities
}

// Namespace is a namespace of the target cluster and its labels.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Spec is what one evaluation reads: the ManifestSync's spec and the
// snapshot of each of its git and object sources, by name. Kustomize sources
// are built by the engine from the snapshots they name.
type Spec struct {
	Sync      *v1alpha1.ManifestSyncSpec
	Snapshots map[string]*Snapshot
	// Name is the ManifestSync's: the release name of its helm sources
	// that set none.
	Name string
}

// Result is what one evaluation produced.
type Result struct {
	// Targets has one entry per evaluated target (one per namespace for a
	// namespaceSelector target), in spec order.
	Targets []*TargetResult
	// Inputs records exactly what was evaluated.
	Inputs v1alpha1.Inputs
	// Revision is a digest over every input: status.lastEvaluatedRevision.
	Revision string
	// Redactor knows every Secret value the evaluation read or produced.
	// The errors of the result are masked with it already; whatever else
	// the caller says about this evaluation (apply errors, events, logs,
	// printed objects) must pass it too.
	Redactor *redact.Redactor
}

// TargetResult is one target's objects, or why it has none.
type TargetResult struct {
	Name      string
	Namespace string
	Cluster   string
	// Objects are normalised and in apply order.
	Objects []*unstructured.Unstructured
	// Digests[i] is Objects[i]'s digest.
	Digests []string
	// Digest is over every object of the target.
	Digest string
	// Err says why the target failed; a failed target's objects must not
	// be applied.
	Err error
	// Selected is set when the target is one namespace of a
	// namespaceSelector target.
	Selected bool
	// Violations are the schema violations of the target's objects; when
	// there are any, Err is a *ValidationError holding them.
	Violations []Violation
	// Collisions are the objects another target writes too; when there
	// are any, Err is a *CollisionError holding them and the target has
	// no objects.
	Collisions []Collision
	// copies, when set, makes the objects the evaluation did not keep
	// (Options.Compact).
	copies *inputCopies
}

// Manifests are the target's objects: Objects, or, for a target whose
// objects the evaluation did not keep (Options.Compact), the same objects
// made again from the inputs. The objects made again are the caller's.
func (t *TargetResult) Manifests() ([]*unstructured.Unstructured, error) {
	return t.manifestsInto(nil)
}

// manifestsInto is Manifests, made in s's objects for a compact target
// when s is not nil: valid until s is used again.
func (t *TargetResult) manifestsInto(s *scratch) ([]*unstructured.Unstructured, error) {
	if t.copies == nil {
		return t.Objects, nil
	}
	var (
		objs []*unstructured.Unstructured
		err  error
	)
	if s == nil {
		objs, err = t.copies.make()
	} else {
		objs, err = t.copies.makeInto(s)
	}
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", t.ID(), err)
	}
	if len(objs) != t.copies.n {
		return nil, fmt.Errorf("target %q: made %d objects again, evaluated %d", t.ID(), len(objs), t.copies.n)
	}
	return objs, nil
}

// WithManifests is t with its objects (Manifests) and their digests: t
// itself when the evaluation kept them, else a copy of t that holds them.
// The digests made again must make the target's digest.
func (t *TargetResult) WithManifests() (*TargetResult, error) {
	if t.copies == nil {
		return t, nil
	}
	objs, err := t.Manifests()
	if err != nil {
		return nil, err
	}
	full := *t
	full.Objects, full.copies = objs, nil
	c := canonicals.Get().(*canonical)
	defer canonicals.Put(c)
	if full.Digests, full.Digest, err = c.digests(objs); err != nil {
		return nil, fmt.Errorf("target %q: %w", t.ID(), err)
	}
	if full.Digest != t.Digest {
		return nil, fmt.Errorf("target %q: its objects made again have digest %s, evaluated %s", t.ID(), full.Digest, t.Digest)
	}
	return &full, nil
}

// Len is how many objects the target has, whether kept or not.
func (t *TargetResult) Len() int {
	if t.copies == nil {
		return len(t.Objects)
	}
	return t.copies.n
}

// inputCopies are the objects of a target made of the inputs themselves:
// what evaluateTarget makes of them, made again.
type inputCopies struct {
	inputs    []Input
	namespace string
	scope     Scope
	n         int // how many objects that makes
}

func (c *inputCopies) make() ([]*unstructured.Unstructured, error) {
	objs := make([]*unstructured.Unstructured, len(c.inputs))
	for i, in := range c.inputs {
		objs[i] = &unstructured.Unstructured{Object: targetCopy(in.Object)}
	}
	return c.normalized(objs)
}

// makeInto is make into the objects of s, which are valid until s is
// used again: for what only reads them while s is not (the ids of a
// compact target's objects).
func (c *inputCopies) makeInto(s *scratch) ([]*unstructured.Unstructured, error) {
	return c.normalized(s.copies(c.inputs))
}

// normalized are objs, copies of c's inputs, as evaluateTarget leaves its
// objects: normalized and sorted.
func (c *inputCopies) normalized(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	scope := withCRDs(c.scope, objs)
	for i, o := range objs {
		if err := normalize(o, c.namespace, scope); err != nil {
			return nil, fmt.Errorf("object [%d]: %w", i, err)
		}
	}
	sortObjects(objs)
	return objs, nil
}

// ID names the target in messages and file names: its name, or name/namespace
// for one namespace of a namespaceSelector target.
func (t *TargetResult) ID() string {
	if t.Selected {
		return t.Name + "/" + t.Namespace
	}
	return t.Name
}

// Err joins the errors of every failed target.
func (r *Result) Err() error {
	var errs []error
	for _, t := range r.Targets {
		if t.Err != nil {
			errs = append(errs, t.Err)
		}
	}
	return errors.Join(errs...)
}

// Evaluate runs the pipeline: inputs from the snapshots, the transform once
// per target, the target's patches, normalisation and digests. An error
// means nothing could be evaluated (a bad spec, a missing snapshot, a script
// that does not load); a target that fails on its own carries its error in
// its TargetResult.
//
// Every error it returns, and every target's, has the Secret values of the
// evaluation masked (Result.Redactor).
func Evaluate(ctx context.Context, spec Spec, opts Options) (*Result, error) {
	red := SnapshotRedactor(spec.Snapshots)
	res, err := evaluate(ctx, spec, opts, red)
	if res != nil {
		res.Redactor = red
		for _, t := range res.Targets {
			if t == nil {
				continue
			}
			t.Err = red.Error(t.Err)
			for i := range t.Violations {
				t.Violations[i].Msg = red.String(t.Violations[i].Msg)
			}
		}
	}
	return res, red.Error(err)
}

func evaluate(ctx context.Context, spec Spec, opts Options, red *redact.Redactor) (*Result, error) {
	if errs := Validate(spec.Sync); len(errs) > 0 {
		return nil, errs
	}
	if opts.Scope == nil {
		opts.Scope = BuiltinScope
	}
	opts.Scope = rememberScope(opts.Scope)
	e := &evaluation{spec: spec.Sync, name: spec.Name, opts: opts, snaps: map[string]*Snapshot{}, red: red}
	err := e.resolveSources(spec.Snapshots)
	for _, in := range e.objects {
		red.AddObject(in.Object) // kustomize builds make Secrets of their own
	}
	if err != nil {
		return nil, err
	}
	targets, err := e.expandTargets()
	if err != nil {
		return nil, err
	}
	if err := e.loadTransform(ctx); err != nil {
		return nil, err
	}
	if err := e.loadSchemas(); err != nil {
		return nil, err
	}
	if err := e.digestInputs(); err != nil {
		return nil, err
	}
	res := &Result{Targets: make([]*TargetResult, len(targets)), Inputs: e.inputs, Revision: e.revision}
	workers := opts.Workers
	if workers <= 0 {
		workers = goruntime.GOMAXPROCS(0)
	}
	// Workers take the next target from a shared counter: handing each one
	// over a channel would make every target wait for this goroutine.
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(workers, len(targets)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(targets); i = int(next.Add(1) - 1) {
				res.Targets[i] = e.evaluateTarget(ctx, targets[i])
			}
		})
	}
	wg.Wait()
	clusters := make([]string, len(targets))
	for i, t := range targets {
		clusters[i] = clusterKey(t.spec)
	}
	refuseCollisions(res.Targets, clusters)
	return res, ctx.Err()
}

// evaluation is the state one Evaluate call shares across its targets;
// after setup it is read-only, so targets run concurrently.
type evaluation struct {
	spec  *v1alpha1.ManifestSyncSpec
	name  string // the ManifestSync's
	opts  Options
	snaps map[string]*Snapshot // every source, kustomize ones built
	// red learns the Secrets of every target's output as it is made, so
	// that one target's error never shows another's Secret.
	red *redact.Redactor

	inputs    v1alpha1.Inputs
	revision  string
	objects   []Input // step 2, in stable order
	params    map[string]any
	patches   map[string][]*patch // by target name
	interp    *lstar.Interpreter
	module    *lstar.Module
	ctxInputs starlark.Value // frozen, shared by every target
	ctxSource starlark.Value // frozen, shared by every target
	schemas   []*cue.Schemas
	// cueTransform is the CUE transform, if any, and cueDigest its digest.
	cueTransform *cue.Transform
	cueDigest    string
	// helm are the helm sources, rendered per target.
	helm []*helmSource
}

// resolveSources checks that every source has a snapshot, builds the
// kustomize sources and collects the input objects.
func (e *evaluation) resolveSources(given map[string]*Snapshot) error {
	given, err := e.helmSnapshots(given)
	if err != nil {
		return err
	}
	builtFrom := chartSources(e.spec)
	for _, s := range e.spec.Sources {
		if s.Kustomize == nil {
			snap := given[s.Name]
			if snap == nil {
				return fmt.Errorf("source %q: no snapshot", s.Name)
			}
			e.snaps[s.Name] = snap
		} else {
			builtFrom[s.Kustomize.Source] = true
		}
	}
	for _, s := range e.spec.Sources {
		if s.Kustomize == nil {
			continue
		}
		given := given[s.Name]
		if given != nil && !refsOnly(given) {
			// Given directly, e.g. overridden on the command line.
			e.snaps[s.Name] = given
			continue
		}
		base := e.snaps[s.Kustomize.Source]
		if base == nil {
			return fmt.Errorf("source %q: kustomize source %q has no snapshot", s.Name, s.Kustomize.Source)
		}
		snap, err := buildKustomizeSource(&s, base, given)
		if err != nil {
			return err
		}
		e.snaps[s.Name] = snap
	}
	for _, s := range e.spec.Sources {
		snap := e.snaps[s.Name]
		if builtFrom[s.Name] {
			continue // contributes only through the kustomize build or chart
		}
		if s.Helm != nil {
			if err := e.addHelmSource(&s, len(e.objects)); err != nil {
				return err
			}
			continue
		}
		if snap.Object != nil {
			e.objects = append(e.objects, Input{Source: s.Name, Object: snap.Object})
			continue
		}
		if s.Objects != nil {
			e.objects = append(e.objects, setInputs(s.Name, snap)...)
			continue
		}
		objs, err := e.sourceObjects(&s, snap)
		if err != nil {
			return err
		}
		e.objects = append(e.objects, objs...)
	}
	return nil
}

// target is one evaluation unit: a spec target, or one namespace of a
// namespaceSelector target.
type target struct {
	spec      *v1alpha1.Target
	namespace string
	params    *targetParams
}

// targetParams are spec.params merged with a target's own. Targets without
// params of their own share one, so that a transform's ctx.params is made
// once for all of them.
type targetParams struct {
	m map[string]any

	once  sync.Once
	value starlark.Value // frozen
	err   error
}

// starlark returns the params as a frozen Starlark value.
func (p *targetParams) starlark() (starlark.Value, error) {
	p.once.Do(func() {
		p.value, p.err = lstar.ToValue(p.m)
		if p.err == nil {
			p.value.Freeze()
		}
	})
	return p.value, p.err
}

func (e *evaluation) expandTargets() ([]target, error) {
	base, err := rawParams(e.spec.Params)
	if err != nil {
		return nil, fmt.Errorf("spec.params: %w", err)
	}
	e.params = base
	shared := &targetParams{m: base}
	e.patches = map[string][]*patch{}
	for _, name := range e.opts.Targets {
		if !slices.ContainsFunc(e.spec.Targets, func(t v1alpha1.Target) bool { return t.Name == name }) {
			return nil, fmt.Errorf("no target named %q", name)
		}
	}
	var out []target
	for i := range e.spec.Targets {
		t := &e.spec.Targets[i]
		if len(e.opts.Targets) > 0 && !slices.Contains(e.opts.Targets, t.Name) {
			continue
		}
		own, err := rawParams(t.Params)
		if err != nil {
			return nil, fmt.Errorf("spec.targets[%d].params: %w", i, err)
		}
		params := shared
		if len(own) > 0 {
			params = &targetParams{m: mergeParams(base, own)}
		}
		for j, p := range t.Patches {
			pp, err := parsePatch(p)
			if err != nil {
				return nil, fmt.Errorf("spec.targets[%d].patches[%d]: %w", i, j, err)
			}
			e.patches[t.Name] = append(e.patches[t.Name], pp)
		}
		if t.NamespaceSelector == nil {
			out = append(out, target{spec: t, namespace: t.Namespace, params: params})
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("spec.targets[%d].namespaceSelector: %w", i, err)
		}
		namespaces := e.opts.Namespaces
		if t.Cluster != nil && e.opts.ClusterNamespaces != nil {
			namespaces = e.opts.ClusterNamespaces[ClusterID(t.Cluster)]
		}
		if namespaces == nil {
			return nil, fmt.Errorf("target %q: a namespaceSelector needs the namespaces of cluster %q", t.Name, clusterName(t))
		}
		for _, ns := range namespaces {
			if sel.Matches(labels.Set(ns.Labels)) {
				out = append(out, target{spec: t, namespace: ns.Name, params: params})
			}
		}
	}
	return out, nil
}

// rawParams decodes free-form params, keeping integers exact.
func rawParams(raw *runtime.RawExtension) (map[string]any, error) {
	if raw == nil {
		return map[string]any{}, nil
	}
	b := raw.Raw
	if len(b) == 0 || string(b) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := normalizeNumbers(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("got %T, want an object", v)
	}
	return m, nil
}

// normalizeNumbers turns json.Numbers into int64 or float64.
func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = normalizeNumbers(e)
		}
	}
	return v
}

// mergeParams merges over onto base: objects merge key by key, anything
// else in over replaces what base has. Neither argument is modified.
func mergeParams(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = mergeParams(bm, om)
		} else {
			out[k] = v
		}
	}
	return out
}

// SnapshotFiles are source snapshots by name, as scripts see them: load()
// reads them, and so do built-ins that take paths (cue.validate).
type SnapshotFiles map[string]*Snapshot

var _ interface {
	lstar.Files
	lstar.Trees
} = SnapshotFiles(nil)

func (f SnapshotFiles) FileName(source, p string) string { return fileName(f, source, p) }

func (f SnapshotFiles) Tree(source string) (map[string][]byte, error) {
	s := f[source]
	if s == nil {
		return nil, fmt.Errorf("no source named %q: %w", source, errNotExist)
	}
	return s.Files, nil
}

func (f SnapshotFiles) ReadFile(source, name string) ([]byte, error) {
	s := f[source]
	if s == nil {
		return nil, fmt.Errorf("no source named %q: %w", source, errNotExist)
	}
	return s.ReadFile(name)
}

// loadTransform loads the Starlark transform, if any, and builds the parts
// of ctx every target shares.
func (e *evaluation) loadTransform(ctx context.Context) error {
	t := e.spec.Transform
	if t == nil {
		return nil
	}
	if t.CUE != nil {
		return e.loadCUETransform(t.CUE)
	}
	script := lstar.Script{Source: t.Starlark.Source, Path: t.Starlark.Path}
	if t.Starlark.Inline != "" {
		script.Path = "<inline>"
		script.Inline = []byte(t.Starlark.Inline)
	}
	e.interp = lstar.New(lstar.Options{
		Predeclared: stdlib.Predeclared(),
		Limits:      e.opts.Limits,
		Now:         e.now(),
		FileName:    func(source, p string) string { return fileName(e.snaps, source, p) },
	})
	mod, err := e.interp.Load(lstar.WithFiles(ctx, SnapshotFiles(e.snaps), script.Source), SnapshotFiles(e.snaps), script)
	if err != nil {
		return fmt.Errorf("transform: %w", err)
	}
	if fn, ok := mod.Globals["main"].(starlark.Callable); !ok {
		return fmt.Errorf("transform: %s defines no function main(ctx)", e.scriptName(script))
	} else if f, ok := fn.(*starlark.Function); ok && f.NumParams() != 1 {
		return fmt.Errorf("transform: %s: main takes %d parameters, want 1 (ctx)", e.scriptName(script), f.NumParams())
	}
	e.module = mod
	if e.ctxInputs, err = frozenInputs(e.objects); err != nil {
		return fmt.Errorf("transform: ctx.inputs: %w", err)
	}
	e.ctxSource = sourcesValue(e.spec, e.snaps)
	return nil
}

func (e *evaluation) scriptName(s lstar.Script) string {
	if s.Inline != nil {
		return s.Path
	}
	return fileName(e.snaps, s.Source, s.Path)
}

// now is the time scripts see: the newest source revision's time, or the
// Unix epoch, never the clock.
func (e *evaluation) now() time.Time {
	var t time.Time
	for _, s := range e.snaps {
		if s.Time.After(t) {
			t = s.Time
		}
	}
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return t.UTC()
}

func (e *evaluation) digestInputs() error {
	in := v1alpha1.Inputs{Sources: map[string]string{}}
	for name, s := range e.snaps {
		in.Sources[name] = s.Revision
	}
	switch {
	case e.module != nil:
		in.Transform = e.module.Digest()
	case e.cueTransform != nil:
		in.Transform = e.cueDigest
	case e.spec.Transform != nil:
		d, err := digestTyped(e.spec.Transform)
		if err != nil {
			return err
		}
		in.Transform = d
	}
	var err error
	if in.Schemas, err = e.schemasDigest(); err != nil {
		return err
	}
	// Params cover everything of the spec, besides sources and transform,
	// that shapes the output: params, targets (with their params and
	// patches) and the normalisation options.
	if len(e.helm) > 0 {
		// Charts render the cluster's capabilities too (those of
		// helm.template in a transform show in the targets' digests).
		in.Params, err = digestTyped(struct {
			Params              map[string]any
			Targets             []v1alpha1.Target
			Capabilities        HelmCapabilities
			ClusterCapabilities map[string]HelmCapabilities
		}{e.params, e.spec.Targets, e.opts.Capabilities, e.opts.ClusterCapabilities})
	} else {
		in.Params, err = digestTyped(struct {
			Params  map[string]any
			Targets []v1alpha1.Target
		}{e.params, e.spec.Targets})
	}
	if err != nil {
		return err
	}
	e.inputs = in
	e.revision, err = digestTyped(in)
	return err
}

// evaluateTarget runs steps 3 to 5 and 7 for one target.
func (e *evaluation) evaluateTarget(ctx context.Context, t target) *TargetResult {
	res := &TargetResult{Name: t.spec.Name, Namespace: t.namespace, Cluster: clusterName(t.spec), Selected: t.spec.NamespaceSelector != nil}
	fail := func(err error) *TargetResult {
		res.Err = fmt.Errorf("target %q: %w", res.ID(), err)
		return res
	}
	inputs, err := e.targetInputs(ctx, t)
	if err != nil {
		return fail(err)
	}
	var objs []*unstructured.Unstructured
	patched := len(e.patches[t.spec.Name]) > 0
	// A compact target keeps no objects (Options.Compact): the inputs
	// themselves, unchanged by a patch or schema.
	compact := e.opts.Compact && e.module == nil && e.cueTransform == nil && !patched && len(e.schemas) == 0
	switch {
	case e.module != nil:
		raw, err := e.runTransform(ctx, t, inputs)
		if err != nil {
			return fail(err)
		}
		objs = make([]*unstructured.Unstructured, 0, len(raw))
		for _, m := range raw {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	case e.cueTransform != nil:
		raw, err := e.runCUETransform(ctx, t, inputs)
		if err != nil {
			return fail(err)
		}
		for _, m := range raw {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	case compact:
		// The inputs themselves, as below, in maps used again: only
		// their digests are kept.
		s := scratches.Get().(*scratch)
		defer scratches.Put(s)
		objs = s.copies(inputs)
	default:
		// The inputs themselves, whose Secrets the redactor learnt when
		// they were read.
		for _, in := range inputs {
			if patched {
				objs = append(objs, &unstructured.Unstructured{Object: runtimeDeepCopy(in.Object)})
			} else {
				objs = append(objs, &unstructured.Unstructured{Object: targetCopy(in.Object)})
			}
		}
	}
	if e.module != nil || e.cueTransform != nil { // objects the transform made
		e.learnSecrets(objs)
	}
	for i, p := range e.patches[t.spec.Name] {
		if err := p.apply(objs); err != nil {
			return fail(fmt.Errorf("patches[%d]: %w", i, err))
		}
	}
	if len(e.patches[t.spec.Name]) > 0 {
		e.learnSecrets(objs)
	}
	seen := make(map[v1alpha1.ObjectID]int, len(objs))
	scope := withCRDs(e.opts.Scope, objs)
	for i, o := range objs {
		if err := normalize(o, t.namespace, scope); err != nil {
			return fail(fmt.Errorf("object [%d]: %w", i, err))
		}
		if encryptedObject(o.Object) {
			return fail(fmt.Errorf("%s: still SOPS-encrypted (it carries sops metadata): spec.decryption needs the age key it is encrypted for (docs/sops.md)", describe(o)))
		}
		if _, err := WaveOf(o); err != nil {
			return fail(err) // it names the object
		}
		if _, _, err := HookOf(o); err != nil {
			return fail(err) // it names the object
		}
		id := hookID(o)
		if j, dup := seen[id]; dup {
			return fail(fmt.Errorf("objects [%d] and [%d] are both %s", j, i, describe(o)))
		}
		seen[id] = i
	}
	if len(e.schemas) > 0 {
		maps := make([]map[string]any, len(objs))
		names := make([]string, len(objs))
		origins := make([]cue.Position, len(objs))
		for i, o := range objs {
			maps[i], names[i], origins[i] = o.Object, describe(o), e.origin(o.GetKind())
		}
		vs, err := e.validateObjects(maps, names, origins)
		if err != nil {
			return fail(err)
		}
		if len(vs) > 0 {
			res.Violations = vs
			return fail(&ValidationError{Violations: vs})
		}
		for i, o := range objs {
			o.Object = maps[i]
		}
	}
	sortObjects(objs)
	c := canonicals.Get().(*canonical)
	defer canonicals.Put(c)
	if res.Digests, res.Digest, err = c.digests(objs); err != nil {
		return fail(err)
	}
	res.Objects = objs
	if compact { // objs are scratch, let go
		res.Objects, res.Digests, res.copies = nil, nil, &inputCopies{inputs: inputs, namespace: t.namespace, scope: e.opts.Scope, n: len(objs)}
	}
	return res
}

// digests are the digest of each object and the target's, over them.
func (c *canonical) digests(objs []*unstructured.Unstructured) ([]string, string, error) {
	digests := make([]string, len(objs))
	for i, o := range objs {
		d, err := c.digest(o.Object)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", describe(o), err)
		}
		digests[i] = d
	}
	digest, err := c.digest(digests)
	if err != nil {
		return nil, "", err
	}
	return digests, digest, nil
}

// learnSecrets tells the redactor the Secret values of objs.
func (e *evaluation) learnSecrets(objs []*unstructured.Unstructured) {
	for _, o := range objs {
		e.red.AddObject(o.Object)
	}
}

func (e *evaluation) runTransform(ctx context.Context, t target, inputs []Input) ([]map[string]any, error) {
	c, err := e.ctxValue(t, inputs)
	if err != nil {
		return nil, err
	}
	ctx = stdlib.WithHelm(ctx, e.opts.Helm, e.capabilities(t.spec), e.opts.Limits.WithDefaults().MaxBytes)
	v, err := e.interp.Call(lstar.WithFiles(ctx, SnapshotFiles(e.snaps), e.spec.Transform.Starlark.Source), e.module, "main", c)
	if err != nil {
		return nil, e.suggestParam(err, t.params.m)
	}
	if v == starlark.None {
		// A main that falls off its end returns None: taking that for
		// "no objects" would prune everything the target had.
		return nil, fmt.Errorf("%s%s", e.mainPos(), lstar.ErrNoneResult)
	}
	objs, err := e.opts.Limits.WithDefaults().Objects(v)
	if err != nil {
		return nil, fmt.Errorf("main(ctx): %w", err)
	}
	return objs, nil
}

// mainPos is "file:line:col: " of the transform's main, or "" when it is
// not a Starlark function.
func (e *evaluation) mainPos() string {
	if fn, ok := e.module.Globals["main"].(*starlark.Function); ok && fn.Position().IsValid() {
		return fn.Position().String() + ": "
	}
	return ""
}

// ClusterID is a remote cluster as ClusterNamespaces names it: the name
// and key of its kubeconfig Secret, "name/key" (the key defaults to
// "value").
func ClusterID(c *v1alpha1.ClusterRef) string {
	key := c.KubeConfigSecretRef.Key
	if key == "" {
		key = "value"
	}
	return c.KubeConfigSecretRef.Name + "/" + key
}

func clusterName(t *v1alpha1.Target) string {
	if t.Cluster == nil {
		return "in-cluster"
	}
	return t.Cluster.KubeConfigSecretRef.Name
}

// runtimeDeepCopy copies a JSON-shaped value so that targets never share
// (and so never mutate) each other's objects.
// targetCopy is an input object as one target's output when neither a
// transform nor a patch makes it. normalize sets and deletes keys of the
// top level, of metadata and of a Service's spec (its allocated IPs), and
// nothing deeper: those three maps are the target's own, everything else
// (a Secret's data, the labels, a Deployment's spec) is shared with the
// input and every other target's copy. An evaluation's objects are
// read-only once made (the operator copies what it sends), so that a
// fan-out of 20 objects to 1,000 namespaces holds the 20 bodies once, not
// 20,000 times.
func targetCopy(obj map[string]any) map[string]any {
	out := maps.Clone(obj)
	if meta, ok := obj["metadata"].(map[string]any); ok {
		out["metadata"] = maps.Clone(meta)
	}
	if spec, ok := obj["spec"].(map[string]any); ok && obj["kind"] == "Service" {
		out["spec"] = maps.Clone(spec)
	}
	return out
}

// scratch are copies of inputs (targetCopy) whose maps are used again
// for the next inputs: the objects of a compact target are let go as
// soon as their digests or ids are read, and a fan-out of 20 inputs to
// 1,000 namespaces would otherwise make 20,000 objects to throw away at
// each evaluation. A scratch is used by one goroutine at a time.
type scratch struct {
	items []scratchObject
	objs  []*unstructured.Unstructured
}

// scratchObject is one object of a scratch and the maps it owns, which
// it alone writes (those of targetCopy: the others are the input's).
type scratchObject struct {
	u          *unstructured.Unstructured
	meta, spec map[string]any
}

var scratches = sync.Pool{New: func() any { return &scratch{} }}

// copies are targetCopy of each input, in s's maps: valid until the next
// call.
func (s *scratch) copies(inputs []Input) []*unstructured.Unstructured {
	for len(s.items) < len(inputs) {
		s.items = append(s.items, scratchObject{u: &unstructured.Unstructured{Object: map[string]any{}}, meta: map[string]any{}, spec: map[string]any{}})
	}
	s.objs = s.objs[:0]
	for i, in := range inputs {
		it := &s.items[i]
		top := it.u.Object
		clear(top)
		maps.Copy(top, in.Object)
		if meta, ok := in.Object["metadata"].(map[string]any); ok {
			clear(it.meta)
			maps.Copy(it.meta, meta)
			top["metadata"] = it.meta
		}
		if spec, ok := in.Object["spec"].(map[string]any); ok && in.Object["kind"] == "Service" {
			clear(it.spec)
			maps.Copy(it.spec, spec)
			top["spec"] = it.spec
		}
		s.objs = append(s.objs, it.u)
	}
	return s.objs
}

func runtimeDeepCopy(m map[string]any) map[string]any {
	return deepCopyValue(m).(map[string]any)
}

func deepCopyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = deepCopyValue(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = deepCopyValue(e)
		}
		return out
	}
	return v
}
