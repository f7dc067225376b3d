// Package cue is ManifestSync's typing and policy layer: it loads CUE
// packages from source snapshots (in memory, registry off), unifies objects
// with their schemas, fills defaults, requires concrete results, and reports
// violations with the schema's file:line. Format formats CUE files as cue
// fmt does (for `engine fmt`).
//
// It uses CUE through its public API only, reads nothing but the file trees
// it is given, and must not import client-go, controller-runtime, net/http
// or the engine.
package cue

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/manifestsync/manifestsync/schemas"
)

// ErrTimeout is returned when a CUE program runs longer than its context
// allows.
var ErrTimeout = errors.New("CUE evaluation exceeded its time limit")

// Input is what a CUE transform is given for one target. Each field is
// filled into the package at the top level under its JSON name: params,
// target and inputs.
type Input struct {
	// Params are spec.params merged with the target's params.
	Params map[string]any
	// Target describes the target: name, namespace, cluster, labels.
	Target map[string]any
	// Inputs are the objects of the sources.
	Inputs []map[string]any
}

// Position is a place in a CUE file. File is "NAME/relative/path.cue",
// NAME being the name the schema set was loaded with ("builtin:k8s" for a
// builtin set).
type Position struct {
	File   string
	Line   int
	Column int
}

func (p Position) String() string { return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column) }

// Violation is one way an object breaks its schemas or policies.
type Violation struct {
	// Path is the field of the object, e.g. "spec.template.spec.containers[0].image";
	// empty for the whole object. A label that is not an identifier is
	// quoted in brackets: `metadata.labels["app.kubernetes.io/name"]`.
	Path string
	// Msg says what is wrong, e.g. `invalid value "web:latest" (does not match !~":latest$")`.
	Msg string
	// Rule names the definition that was broken, e.g. "#Deployment" or "#Object".
	Rule string
	// Pos are the schema positions involved, the most relevant first.
	Pos []Position

	sels []string // the CUE selectors of Path
}

func (v Violation) String() string {
	s := v.Msg
	if v.Path != "" {
		s = v.Path + ": " + s
	}
	if v.Rule != "" {
		s += " [" + v.Rule + "]"
	}
	if len(v.Pos) > 0 {
		s += " (" + v.Pos[0].String() + ")"
	}
	return s
}

// Options tune how a schema set is evaluated. The zero value is ready to
// use: one validation at a time, contexts recycled at the defaults.
type Options struct {
	// Concurrency is how many validations may run at once; each runs in
	// its own CUE context with its own compiled copy of the schemas, so
	// memory grows with it. 0 means 1.
	Concurrency int
	// RecycleAfter is how many validations a CUE context serves before it
	// is dropped and the schemas are compiled into a fresh one (a few
	// milliseconds for the builtin k8s set), so that what a long-lived
	// context accumulates stays bounded. 0 means DefaultRecycleAfter.
	RecycleAfter int
	// RecycleBytes is the same bound in bytes of validated objects
	// (measured as their JSON size, roughly). 0 means DefaultRecycleBytes.
	RecycleBytes int64
}

// Defaults of Options.
const (
	DefaultRecycleAfter = 5000
	DefaultRecycleBytes = 32 << 20
)

// Schemas is a compiled CUE package whose definitions #<Kind> and #Object
// objects are unified with. Safe for concurrent use.
type Schemas struct {
	name string
	*pool
}

// Load compiles the CUE package in dir of an in-memory file tree (paths are
// slash-separated, relative). name identifies the set in messages ("repo/schemas").
//
// A cue.mod/module.cue in dir or a parent directory of the tree makes the
// tree a CUE module: the package may import the module's other packages.
// Nothing outside the tree is read and the module registry is off, so a
// module's dependencies cannot be fetched; and CUE v0.17 cannot import the
// packages of cue.mod/gen, cue.mod/pkg or cue.mod/usr from such a tree.
func Load(name string, files map[string][]byte, dir string) (*Schemas, error) {
	fsys, err := newMapFS(files)
	if err != nil {
		return nil, fmt.Errorf("schemas %q: %w", name, err)
	}
	return LoadFS(name, fsys, dir, Options{})
}

// LoadFS is Load over any file tree, with options.
func LoadFS(name string, fsys fs.FS, dir string, opts Options) (*Schemas, error) {
	src, err := loadSource(name, fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("schemas %q: %w", name, err)
	}
	p, err := newPool(src, opts)
	if err != nil {
		return nil, fmt.Errorf("schemas %q: %w", name, err)
	}
	return &Schemas{name: name, pool: p}, nil
}

var builtins sync.Map // name -> func() (*Schemas, error)

// Builtin returns a schema set shipped in the binary: "k8s" or "manifestsync".
// It is loaded once, on first use, and shared: up to GOMAXPROCS validations
// run at once, each context compiled only when that many are asked for.
func Builtin(name string) (*Schemas, error) {
	names := schemas.Names()
	if !slices.Contains(names, name) {
		return nil, fmt.Errorf("no builtin schemas %q (have %s)", name, strings.Join(names, ", "))
	}
	f, _ := builtins.LoadOrStore(name, sync.OnceValues(func() (*Schemas, error) {
		fsys, err := fs.Sub(schemas.FS, name)
		if err != nil {
			return nil, err
		}
		return LoadFS("builtin:"+name, fsys, ".", Options{Concurrency: runtime.GOMAXPROCS(0)})
	}))
	return f.(func() (*Schemas, error))()
}

// Name is the name the set was loaded with.
func (s *Schemas) Name() string { return s.name }

// Validate unifies obj with #<obj.kind> and #Object where the package
// defines them, fills defaults and requires a concrete result. It returns the
// object with defaults filled in, or the violations. An error means the
// validation itself could not run.
//
// When the package defines neither definition, obj is returned as it is.
// Otherwise the result is JSON-shaped (map[string]any, []any, string, bool,
// int64, float64, nil). obj is never modified, but the result shares with
// it the maps and lists the schemas add nothing to (all of obj, when it has
// that shape already and nothing is added): copy before modifying either.
func (s *Schemas) Validate(obj map[string]any) (map[string]any, []Violation, error) {
	return s.validate(obj, "")
}

// ValidateAs is Validate against the definition #def alone, such as
// "Params" for #Params: for values that are not objects of a kind. It is
// an error when the package does not define it.
func (s *Schemas) ValidateAs(obj map[string]any, def string) (map[string]any, []Violation, error) {
	return s.validate(obj, strings.TrimPrefix(def, "#"))
}

func (s *Schemas) validate(obj map[string]any, def string) (map[string]any, []Violation, error) {
	data, size, err := prepare(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("schemas %q: %w", s.name, err)
	}
	ev, err := s.acquire(size)
	if err != nil {
		return nil, nil, fmt.Errorf("schemas %q: %w", s.name, err)
	}
	defer s.release(ev)
	out, vs, err := ev.validate(obj, data, def)
	if err != nil {
		return nil, nil, fmt.Errorf("schemas %q: %w", s.name, err)
	}
	return out, vs, nil
}
