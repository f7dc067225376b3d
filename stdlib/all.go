package stdlib

import (
	"slices"
	"strings"

	"go.starlark.net/starlark"
)

// Module documents one predeclared global: a module such as k8s, or a single
// built-in such as struct.
type Module struct {
	Name  string         // the global's name, e.g. "k8s"
	Doc   string         // one short paragraph
	Value starlark.Value // the value scripts see under Name
	Funcs []Func         // every member, in documentation order; a built-in lists itself
}

// Func documents one member of a module: a function, or a constant such as
// math.pi.
type Func struct {
	Name      string // the member's name within its module, e.g. "match"
	Signature string // e.g. "k8s.match(obj, kind=None, ...) -> bool"
	Doc       string // one short paragraph
}

// registry is every documented global, in no particular order; Modules sorts.
var registry = []Module{
	assertModule,
	base64Module,
	cueModule,
	drModule,
	failModule,
	hashModule,
	helmModule,
	jsonModule,
	k8sModule,
	kustomizeModule,
	mathModule,
	reModule,
	structModule,
	timeModule,
	yamlModule,
}

// Modules returns the documentation of every global, sorted by name. It
// includes fail, which is part of Starlark's universe rather than of
// Predeclared, so that `engine doc` lists it with the rest. The slice is the
// caller's to modify.
func Modules() []Module {
	mods := make([]Module, len(registry))
	for i, m := range registry {
		m.Funcs = slices.Clone(m.Funcs)
		mods[i] = m
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Name, b.Name) })
	return mods
}

// Predeclared returns the globals given to every ManifestSync script: yaml,
// json, base64, hash, struct, math, re, time, k8s, kustomize, helm, dr, assert and cue. The hash module
// shadows Starlark's built-in hash(x), which scripts have no use for. The values are
// frozen and safe to share between threads; the dictionary itself is new on
// every call.
func Predeclared() starlark.StringDict {
	globals := make(starlark.StringDict, len(registry))
	for _, m := range registry {
		if m.Value == starlark.Universe[m.Name] {
			continue // Starlark's own, documented only: fail
		}
		m.Value.Freeze()
		globals[m.Name] = m.Value
	}
	return globals
}

// failModule documents Starlark's own fail, which scripts use to stop an
// evaluation with a message of their own.
var failModule = Module{
	Name:  "fail",
	Doc:   "Starlark's built-in fail stops the evaluation with an error carrying the script's line; use it to reject bad params or inputs.",
	Value: starlark.Universe["fail"],
	Funcs: []Func{{
		Name:      "fail",
		Signature: `fail(*args, sep=" ")`,
		Doc:       "Stops the evaluation with an error whose message is the arguments formatted with str and joined by sep. It never returns.",
	}},
}
