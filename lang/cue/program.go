//go:build !leanoperator

package cue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"

	"cuelang.org/go/cue"
)

// anonymousPackage is the package given to program files without one.
const anonymousPackage = "transform"

// Program is a CUE package that values are filled into and expressions
// exported from: a transform, or what a script passes to cue.export. It is
// compiled once, evaluated with each set of values in a context that is
// recycled like those of Schemas. Safe for concurrent use.
type Program struct {
	name string
	*pool
}

// LoadProgram parses the CUE package in dir of an in-memory file tree.
// Files of dir without a package clause are made one package, so that
// they see each other's fields, without changing their line numbers.
// Evaluation waits for Export, which fills the values in first.
func LoadProgram(name string, files map[string][]byte, dir string) (*Program, error) {
	return loadProgram(name, files, dir, nil)
}

// loadProgram is LoadProgram; decls, when set, returns a file that is added
// to the package, given its name.
func loadProgram(name string, files map[string][]byte, dir string, decls func(pkg string) string) (*Program, error) {
	d, err := cleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fsys, err := newMapFS(files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if pkg, found := packageName(fsys, d); found {
		files = maps.Clone(files)
		if pkg == "" {
			// A package clause on the first line keeps line numbers.
			pkg = anonymousPackage
			for p, b := range files {
				if path.Dir(p) == d && path.Ext(p) == ".cue" {
					files[p] = append([]byte("package "+pkg+", "), b...)
				}
			}
		}
		if decls != nil {
			files[path.Join(d, declsFile)] = []byte(decls(pkg))
		}
		if fsys, err = newMapFS(files); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	src, err := loadSource(name, fsys, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	src.lazy = true
	p, err := newPool(src, Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &Program{name: name, pool: p}, nil
}

// declsFile is the file loadProgram adds to a package.
const declsFile = "manifestsync_decls.cue"

// Export fills each of values into the package under its key, requires the
// package to be free of conflicts, and exports the value at expression (a
// CUE path such as "objects" or "out.list"; "" for the whole package) as a
// JSON-shaped Go value. The value must be concrete.
//
// CUE evaluation cannot be interrupted: when ctx ends first, Export returns
// ErrTimeout at once and the evaluation goes on in the background until it
// finishes, in a context that is then dropped.
func (p *Program) Export(ctx context.Context, values map[string]any, expression string) (any, error) {
	return p.run(ctx, values, expression, export)
}

// run evaluates the package with values filled in and returns what fn
// makes of the concrete value at expression.
func (p *Program) run(ctx context.Context, values map[string]any, expression string, fn func(cue.Value) (any, error)) (any, error) {
	expr := cue.ParsePath(expression)
	if err := expr.Err(); err != nil {
		return nil, fmt.Errorf("%s: expression %q: %w", p.name, expression, err)
	}
	data, size, err := prepare(orEmpty(values))
	if err != nil {
		return nil, err
	}
	ev, err := p.acquire(size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := p.eval(ev, data, expr, expression, fn)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		p.release(ev)
		return r.v, r.err
	case <-ctx.Done():
		go func() { <-done; p.release(nil) }()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s: %w", p.name, ErrTimeout)
		}
		return nil, ctx.Err()
	}
}

func (p *Program) eval(ev *evaluator, values map[string]any, expr cue.Path, text string, fn func(cue.Value) (any, error)) (any, error) {
	v := ev.pkg
	for _, k := range slices.Sorted(maps.Keys(values)) {
		v = v.FillPath(cue.MakePath(cue.Str(k)), ev.ctx.Encode(values[k]))
	}
	// Conflicts anywhere in the package are errors, even where the
	// expression does not look.
	if err := v.Validate(); err != nil {
		return nil, withPositions(err)
	}
	out := v.LookupPath(expr)
	if !out.Exists() {
		return nil, fmt.Errorf("%s: expression %q: no such field", p.name, text)
	}
	if err := check(out); err != nil {
		return nil, withPositions(err)
	}
	return fn(out)
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
