package stdlib

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// CUE is the Starlark module cue: CUE schemas and programs from a script.
//
//	cue.validate(obj, schema, definition=None) -> dict
//	cue.export(program, expression="", values=None) -> value
//
// A schema or program is CUE text, or the path of a directory of a source
// snapshot that holds a CUE package (or of one .cue file: its directory's
// package), resolved as load() resolves paths: relative to the file that
// calls the built-in. A string that names no file
// or directory of the snapshot and contains a ':' or '{' is CUE text.
var CUE = &starlarkstruct.Module{
	Name: "cue",
	Members: starlark.StringDict{
		"validate": newBuiltin("cue.validate", cueValidate),
		"export":   newBuiltin("cue.export", cueExport),
	},
}

var cueModule = Module{
	Name:  "cue",
	Doc:   "Validates values against CUE schemas and evaluates CUE programs. A schema or program argument is CUE text, or a path in a source snapshot naming a directory with a CUE package or a .cue file, resolved as load() resolves modules: \"schemas\" is next to the calling file, \"//schemas\" at the root of its source, \"@repo//schemas\" in source repo. Compiled packages are cached by content, so calling these once per target costs one compilation.",
	Value: CUE,
	Funcs: []Func{
		{"validate", "cue.validate(obj, schema, definition=None) -> dict", "Unifies the dict obj with the schema's #<Kind> and #Object definitions (as spec.schemas does), or with the named definition alone (\"#Params\"), and returns obj with the schema's defaults filled in. Fails listing every violation with its field, rule and the schema's file:line."},
		{"export", "cue.export(program, expression=\"\", values=None) -> value", "Fills each entry of the dict values into the CUE program at the top level, requires the result to be free of conflicts, and returns the concrete value at expression (a CUE path such as \"objects\" or \"out.list\"; the whole value when empty) as Starlark values."},
	},
}

func cueValidate(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		objv       *starlark.Dict
		schema     string
		definition string
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj", &objv, "schema", &schema, "definition?", &definition); err != nil {
		return nil, err
	}
	x, err := lstar.FromValue(objv)
	if err != nil {
		return nil, fmt.Errorf("obj: %w", err)
	}
	obj := x.(map[string]any)
	name, files, dir, err := cueInput(thread, schema)
	if err != nil {
		return nil, err
	}
	s, err := cueCache.schemas(name, files, dir)
	if err != nil {
		return nil, err
	}
	var (
		out map[string]any
		vs  []cue.Violation
	)
	if definition != "" {
		out, vs, err = s.ValidateAs(obj, definition)
	} else {
		out, vs, err = s.Validate(obj)
	}
	if err != nil {
		return nil, err
	}
	if len(vs) > 0 {
		msgs := make([]string, len(vs))
		for i, v := range vs {
			msgs[i] = v.String()
		}
		noun := "violation"
		if len(vs) > 1 {
			noun += "s"
		}
		return nil, fmt.Errorf("%d %s:\n  %s", len(vs), noun, strings.Join(msgs, "\n  "))
	}
	return lstar.ToValue(out)
}

func cueExport(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		program    string
		expression string
		valuesv    *starlark.Dict
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "program", &program, "expression?", &expression, "values?", &valuesv); err != nil {
		return nil, err
	}
	values := map[string]any{}
	if valuesv != nil {
		x, err := lstar.FromValue(valuesv)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		values = x.(map[string]any)
	}
	ctx := lstar.ContextOf(thread)
	name, files, dir, err := cueInput(thread, program)
	if err != nil {
		return nil, err
	}
	p, err := cueCache.program(name, files, dir)
	if err != nil {
		return nil, err
	}
	out, err := p.Export(ctx, values, expression)
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(out)
}

// inlineCUEFile names the file CUE text is compiled from.
const inlineCUEFile = "<cue>.cue"

// cueInput finds what a schema or program argument names: a directory of
// a source snapshot (relative to the calling file, as load() resolves), or
// CUE text. name is what messages call it.
func cueInput(thread *starlark.Thread, arg string) (name string, files map[string][]byte, dir string, err error) {
	ctx := lstar.ContextOf(thread)
	tree, source, clean, perr := lstar.ResolveTree(thread, arg)
	if perr == nil {
		if _, isFile := tree[clean]; isFile {
			if path.Ext(clean) != ".cue" {
				return "", nil, "", fmt.Errorf("%s is not a .cue file", lstar.DisplayName(ctx, source, clean))
			}
			clean = path.Dir(clean)
		}
		if clean == "." || hasPrefixDir(tree, clean) {
			return strings.TrimSuffix(lstar.DisplayName(ctx, source, ""), "/"), tree, clean, nil
		}
	}
	if strings.ContainsAny(arg, ":{") {
		return "<cue>", map[string][]byte{inlineCUEFile: []byte(arg)}, ".", nil
	}
	if perr != nil {
		return "", nil, "", perr
	}
	return "", nil, "", fmt.Errorf("%s: no such file or directory", lstar.DisplayName(ctx, source, clean))
}

// hasPrefixDir reports whether some file of tree is under dir.
func hasPrefixDir(tree map[string][]byte, dir string) bool {
	prefix := dir + "/"
	for p := range tree {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// cueCache keeps compiled schemas and programs by content, so that a
// script that validates against the same package for each of many targets
// compiles it once. It is bounded: a long-running operator sees many
// revisions.
var cueCache = &compiledCache{max: 64, entries: map[[32]byte]any{}}

type compiledCache struct {
	mu      sync.Mutex
	max     int
	order   [][32]byte // insertion order, for eviction
	entries map[[32]byte]any
}

// key digests what a compilation depends on: the kind, the directory and
// every .cue file of the tree (a package may import the module's others).
func (c *compiledCache) key(kind, name string, files map[string][]byte, dir string) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", kind, name, dir)
	paths := make([]string, 0, len(files))
	for p := range files {
		if path.Ext(p) == ".cue" {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(files[p]))
		h.Write(files[p])
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *compiledCache) get(k [32]byte) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.entries[k]
	return v, ok
}

func (c *compiledCache) put(k [32]byte, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; ok {
		return
	}
	c.entries[k] = v
	c.order = append(c.order, k)
	for len(c.order) > c.max {
		delete(c.entries, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *compiledCache) schemas(name string, files map[string][]byte, dir string) (*cue.Schemas, error) {
	k := c.key("schemas", name, files, dir)
	if v, ok := c.get(k); ok {
		return v.(*cue.Schemas), nil
	}
	s, err := cue.Load(name, files, dir)
	if err != nil {
		return nil, unwrapSchemas(err)
	}
	c.put(k, s)
	return s, nil
}

func (c *compiledCache) program(name string, files map[string][]byte, dir string) (*cue.Program, error) {
	k := c.key("program", name, files, dir)
	if v, ok := c.get(k); ok {
		return v.(*cue.Program), nil
	}
	p, err := cue.LoadProgram(name, files, dir)
	if err != nil {
		return nil, err
	}
	c.put(k, p)
	return p, nil
}

// unwrapSchemas drops the `schemas "NAME": ` prefix cue.Load adds, since
// the positions in the message name the files already.
func unwrapSchemas(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}
