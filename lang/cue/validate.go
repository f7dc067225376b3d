//go:build !leanoperator

package cue

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cuelang.org/go/cue"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"
)

// ruleObject is the definition every object is unified with.
const ruleObject = "#Object"

var errNotStruct = errors.New("result is not an object")

// evaluator is one CUE context with the schemas compiled into it. It is
// used by one validation at a time.
type evaluator struct {
	ctx       *cue.Context
	pkg       cue.Value
	object    cue.Value
	hasObject bool
	kinds     map[string]*kindSchema // by kind, on first use
	uses      int
	bytes     int64
}

// kindSchema is what objects of one kind are unified with.
type kindSchema struct {
	def     cue.Value // #<Kind>, when hasKind
	hasKind bool
	all     cue.Value // #<Kind> & #Object, or the one defined, when any
	any     bool
}

func newEvaluator(ctx *cue.Context, pkg cue.Value) *evaluator {
	ev := &evaluator{ctx: ctx, pkg: pkg, kinds: map[string]*kindSchema{}}
	ev.object, ev.hasObject = lookupDef(pkg, ruleObject[1:])
	return ev
}

// schema returns the schema of kind, unified once per context.
func (ev *evaluator) schema(kind string) *kindSchema {
	if ks, ok := ev.kinds[kind]; ok {
		return ks
	}
	ks := &kindSchema{}
	ks.def, ks.hasKind = lookupDef(ev.pkg, kind)
	switch {
	case ks.hasKind && ev.hasObject:
		ks.all, ks.any = ks.def.Unify(ev.object), true
	case ks.hasKind:
		ks.all, ks.any = ks.def, true
	case ev.hasObject:
		ks.all, ks.any = ev.object, true
	}
	ev.kinds[kind] = ks
	return ks
}

// validate unifies data, the prepared obj, with #<Kind> and #Object, or
// when def is set with that definition alone.
func (ev *evaluator) validate(obj, data map[string]any, def string) (map[string]any, []Violation, error) {
	kind, _ := obj["kind"].(string)
	var ks *kindSchema
	if def != "" {
		d, ok := lookupDef(ev.pkg, def)
		if !ok {
			return nil, nil, fmt.Errorf("no definition #%s", def)
		}
		kind, ks = def, &kindSchema{def: d, hasKind: true, all: d, any: true}
	} else {
		ks = ev.schema(kind)
	}
	if !ks.any {
		return obj, nil, nil
	}
	val := ev.ctx.Encode(data)
	if err := val.Err(); err != nil {
		return nil, nil, withPositions(err)
	}
	v := val.Unify(ks.all)
	if err := check(v); err != nil {
		vs := ev.violationsOf(val, kind, def, ks, err)
		return nil, ev.recheck(data, kind, def, ks, vs), nil
	}
	out, err := fill(v, val, data)
	if err != nil {
		return nil, nil, err
	}
	m, ok := out.(map[string]any)
	if !ok {
		return nil, nil, errNotStruct
	}
	return m, nil, nil
}

// fill returns data, whose CUE value is d, with what v, d unified with the
// schemas, adds to it: defaults and fields the schemas set. Where v adds
// nothing, d is an instance of v (a cheap test) and the part of data is
// kept as it is; only the parts that change are copied and exported.
func fill(v, d cue.Value, data any) (any, error) {
	if v.Subsume(d, cue.Final()) == nil {
		return data, nil
	}
	switch data := data.(type) {
	case map[string]any:
		it, err := v.Fields()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(data)+1)
		for it.Next() {
			label := it.Selector().Unquoted()
			var x any
			if old, ok := data[label]; ok {
				x, err = fill(it.Value(), d.LookupPath(cue.MakePath(cue.Str(label))), old)
			} else {
				x, err = export(it.Value())
			}
			if err != nil {
				return nil, err
			}
			m[label] = x
		}
		return m, nil
	case []any:
		it, err := v.List()
		if err != nil {
			return nil, err
		}
		l := make([]any, 0, len(data))
		for i := 0; it.Next(); i++ {
			var x any
			if i < len(data) {
				x, err = fill(it.Value(), d.LookupPath(cue.MakePath(cue.Index(i))), data[i])
			} else {
				x, err = export(it.Value())
			}
			if err != nil {
				return nil, err
			}
			l = append(l, x)
		}
		return l, nil
	}
	return export(v)
}

func (ev *evaluator) violationsOf(val cue.Value, kind, def string, ks *kindSchema, err error) []Violation {
	if def != "" {
		return toViolations(err, "#"+def, ks.def)
	}
	return ev.violations(val, kind, ks, err)
}

// recheck finds what conflicts hide. CUE reports a missing required field
// or an incomplete value only when nothing conflicts, so an object with a
// bad image and no resource limits would show the image alone. recheck
// removes the fields in conflict from data and unifies again, once, and
// adds the new violations that are not about the removed fields.
func (ev *evaluator) recheck(data map[string]any, kind, def string, ks *kindSchema, vs []Violation) []Violation {
	pruned := any(data)
	var removed [][]string
	for _, v := range vs {
		if len(v.sels) == 0 {
			return vs // the object as a whole is wrong: nothing to prune
		}
		pruned = without(pruned, v.sels)
		removed = append(removed, v.sels)
	}
	val := ev.ctx.Encode(pruned)
	err := check(val.Unify(ks.all))
	if err == nil {
		return vs
	}
	seen := make(map[string]bool, len(vs))
	for _, v := range vs {
		seen[v.Path+"\x00"+v.Msg] = true
	}
	for _, v := range ev.violationsOf(val, kind, def, ks, err) {
		if seen[v.Path+"\x00"+v.Msg] || slices.ContainsFunc(removed, func(r []string) bool { return hasPrefix(v.sels, r) }) {
			continue
		}
		vs = append(vs, v)
	}
	return vs
}

func hasPrefix(sels, prefix []string) bool {
	return len(sels) >= len(prefix) && slices.Equal(sels[:len(prefix)], prefix)
}

// without returns v with the field at sels removed, copying only the maps
// and lists on the way to it.
func without(v any, sels []string) any {
	if len(sels) == 0 {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		label := sels[0]
		if u, err := strconv.Unquote(label); err == nil {
			label = u
		}
		x, ok := v[label]
		if !ok {
			return v
		}
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = e
		}
		if len(sels) == 1 {
			delete(m, label)
		} else {
			m[label] = without(x, sels[1:])
		}
		return m
	case []any:
		i, err := strconv.Atoi(sels[0])
		if err != nil || i < 0 || i >= len(v) || len(sels) == 1 {
			return v // an element cannot be removed without shifting the others
		}
		l := slices.Clone(v)
		l[i] = without(v[i], sels[1:])
		return l
	}
	return v
}

// check requires v to be valid, concrete and complete.
func check(v cue.Value) error {
	return v.Validate(cue.Concrete(true), cue.Final())
}

// violations attributes the errors of unifying val with both definitions
// to each of them, by unifying it with each alone.
func (ev *evaluator) violations(val cue.Value, kind string, ks *kindSchema, err error) []Violation {
	switch {
	case !ks.hasKind:
		return toViolations(err, ruleObject, ev.object)
	case !ev.hasObject:
		return toViolations(err, "#"+kind, ks.def)
	}
	var vs []Violation
	if kerr := check(val.Unify(ks.def)); kerr != nil {
		vs = toViolations(kerr, "#"+kind, ks.def)
	}
	if oerr := check(val.Unify(ev.object)); oerr != nil {
		// What both break is reported once, for #<Kind>.
		seen := make(map[string]bool, len(vs))
		for _, v := range vs {
			seen[v.Path+"\x00"+v.Msg] = true
		}
		for _, v := range toViolations(oerr, ruleObject, ev.object) {
			if !seen[v.Path+"\x00"+v.Msg] {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		// Each alone is fine; only together they conflict.
		vs = toViolations(err, "#"+kind+" & "+ruleObject, ks.def)
	}
	return vs
}

// toViolations turns CUE errors into violations of rule, the definition
// def.
func toViolations(err error, rule string, def cue.Value) []Violation {
	errs := cueerrors.Errors(err)
	vs := make([]Violation, 0, len(errs))
	seen := make(map[string]bool, len(errs))
	paths := make(map[string]int, len(errs))
	for _, e := range errs {
		paths[formatPath(e.Path())]++
	}
	for _, e := range errs {
		v := Violation{Path: formatPath(e.Path()), Msg: message(e), Rule: rule, sels: e.Path()}
		key := v.Path + "\x00" + v.Msg
		if seen[key] || isDisjunctionSummary(e) && paths[v.Path] > 1 {
			continue
		}
		seen[key] = true
		v.Pos = innermostFirst(declaredAt(def, e.Path()), positions(e))
		vs = append(vs, v)
	}
	return vs
}

// innermostFirst orders the positions of an error: first those inside the
// declaration of the field in error (decl, followed through references to
// other definitions: the constraint itself), then the declaration, then
// the definition it refers to, then the rest as CUE gives them. An error
// CUE gives no position (a field the definition does not allow, say) so
// gets the positions of the definition that does not allow it.
func innermostFirst(decl cue.Value, ps []Position) []Position {
	var out []Position
	add := func(p Position) {
		if p.File != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	target := decl
	for range 8 {
		root, path := target.ReferencePath()
		if !root.Exists() {
			break
		}
		next := root.LookupPath(path)
		if !next.Exists() {
			break
		}
		target = next
	}
	if src := target.Source(); src != nil {
		from, to := src.Pos(), src.End()
		for _, p := range ps {
			if p.File == from.Filename() && after(p, from) && !after(p, to) {
				add(p)
			}
		}
	}
	add(toPosition(decl.Pos()))
	add(toPosition(target.Pos()))
	for _, p := range ps {
		add(p)
	}
	return out
}

// after reports whether p is at or after q in the same file.
func after(p Position, q token.Pos) bool {
	return p.Line > q.Line() || p.Line == q.Line() && p.Column >= q.Column()
}

func toPosition(p token.Pos) Position {
	if p.Filename() == "" {
		return Position{}
	}
	return Position{File: p.Filename(), Line: p.Line(), Column: p.Column()}
}

// isDisjunctionSummary reports whether e only says how many errors the
// disjuncts of a disjunction had; they follow it.
func isDisjunctionSummary(e cueerrors.Error) bool {
	format, _ := e.Msg()
	return strings.HasSuffix(format, "errors in empty disjunction:")
}

// declaredAt follows path (as in CUE errors) into def as far as def
// declares it, through optional and required fields, list elements and
// pattern constraints, and returns the value reached.
func declaredAt(def cue.Value, path []string) cue.Value {
	at := def
	for _, s := range path {
		var sels []cue.Selector
		switch {
		case isIndex(s):
			sels = []cue.Selector{cue.AnyIndex}
		default:
			label := s
			if strings.HasPrefix(s, `"`) {
				if u, err := strconv.Unquote(s); err == nil {
					label = u
				}
			}
			if strings.HasPrefix(label, "#") || strings.HasPrefix(label, "_") {
				return at
			}
			sels = []cue.Selector{cue.Str(label), cue.Str(label).Optional(), cue.Str(label).Required(), cue.AnyString}
		}
		next := cue.Value{}
		for _, sel := range sels {
			if v := at.LookupPath(cue.MakePath(sel)); v.Exists() {
				next = v
				break
			}
		}
		if !next.Exists() {
			return at
		}
		at = next
	}
	return at
}
