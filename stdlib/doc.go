// Package stdlib provides the Starlark modules that ManifestSync predeclares
// for transforms and their tests: yaml, json, base64, hash, struct, math, re,
// time, k8s, dr (disaster recovery copies of a namespace) and assert. Each module lives in a file of its own as a Go value
// whose doc comment gives its Starlark-side API. [Modules] lists them, with a
// paragraph for every module and function, for `engine doc`; [Markdown] and
// [Stubs] render the same tables as docs/stdlib.md and as type stubs for
// Starlark language servers; [Predeclared] returns them as the globals of a
// script.
//
// The package also exports the patch functions the engine applies for a
// target's static patches ([MergePatch], [StrategicMerge], [JSONPatch]), so
// that a script and a ManifestSync spec patch an object in exactly the same
// way.
//
// Built-ins are pure functions of their arguments: they read no file, network,
// environment or clock (time.now reads the clock the interpreter sets on the
// thread), never mutate their arguments, turn panics into errors and name
// themselves in every error they report ("k8s.json_patch: op 1: ...").
//
// stdlib builds on lang/starlark and must not import client-go,
// controller-runtime, net/http or the engine.
package stdlib
