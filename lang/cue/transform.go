//go:build !leanoperator

package cue

import (
	"context"
	"fmt"

	"cuelang.org/go/cue"
)

// Transform is a CUE package that computes the objects of a target: the
// engine fills in params, target and inputs, and exports the value at an
// expression. Safe for concurrent use.
type Transform struct {
	prog *Program
	expr string
}

// LoadTransform compiles the CUE package in dir of an in-memory file tree
// as a transform exporting expression (a CUE path such as "objects" or
// "out.list"). name identifies the package in messages, as with Load. The
// package may use params, target and inputs without declaring them.
func LoadTransform(name string, files map[string][]byte, dir, expression string) (*Transform, error) {
	if err := cue.ParsePath(expression).Err(); err != nil {
		return nil, fmt.Errorf("transform %q: expression %q: %w", name, expression, err)
	}
	p, err := loadProgram(name, files, dir, inputDecls)
	if err != nil {
		return nil, fmt.Errorf("transform %w", err)
	}
	return &Transform{prog: p, expr: expression}, nil
}

func inputDecls(pkg string) string {
	return "package " + pkg + "\n\n" + `// Filled in by ManifestSync for each target.
params: {...}
target: {
	name:      string
	namespace: string
	cluster:   string
	labels: [string]: string
}
inputs: [...{...}]
`
}

// Eval fills in the input, exports the expression and returns its objects:
// the elements of a list, or the values of a struct in field order, where
// a value that is not an object (it has no kind) is itself a list or struct
// of objects. Every object must be concrete. When ctx ends first, Eval
// returns ErrTimeout, as Program.Export does.
func (t *Transform) Eval(ctx context.Context, in Input) ([]map[string]any, error) {
	inputs := make([]any, len(in.Inputs))
	for i, o := range in.Inputs {
		inputs[i] = o
	}
	values := map[string]any{"params": orEmpty(in.Params), "target": orEmpty(in.Target), "inputs": inputs}
	v, err := t.prog.run(ctx, values, t.expr, func(v cue.Value) (any, error) {
		var objs []map[string]any
		err := collect(v, t.expr, &objs)
		return objs, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]map[string]any), nil
}

// collect appends the objects of v, a list or struct of objects, to objs.
func collect(v cue.Value, at string, objs *[]map[string]any) error {
	if d, ok := v.Default(); ok {
		v = d
	}
	switch v.Kind() {
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return withPositions(err)
		}
		for i := 0; it.Next(); i++ {
			if err := collect(it.Value(), fmt.Sprintf("%s[%d]", at, i), objs); err != nil {
				return err
			}
		}
		return nil
	case cue.StructKind:
		if v.LookupPath(cue.MakePath(cue.Str("kind"))).Exists() {
			x, err := export(v)
			if err != nil {
				return fmt.Errorf("%s: %w", at, withPositions(err))
			}
			*objs = append(*objs, x.(map[string]any))
			return nil
		}
		it, err := v.Fields()
		if err != nil {
			return withPositions(err)
		}
		for it.Next() {
			if err := collect(it.Value(), at+"."+it.Selector().String(), objs); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: %s is not an object, nor a list or struct of objects%s", at, v.Kind(), posSuffix(v))
}

func posSuffix(v cue.Value) string {
	if p := v.Pos(); p.IsValid() {
		return " (" + toPosition(p).String() + ")"
	}
	return ""
}
