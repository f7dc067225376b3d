package stdlib

import (
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/manifestsync/manifestsync/lang/kustomize"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// Kustomize is the Starlark module kustomize.
//
//	kustomize.build(path) -> list
var Kustomize = &starlarkstruct.Module{
	Name: "kustomize",
	Members: starlark.StringDict{
		"build": newBuiltin("kustomize.build", kustomizeBuild),
	},
}

var kustomizeModule = Module{
	Name:  "kustomize",
	Doc:   "Runs `kustomize build` over a directory of a source snapshot, in memory: what a kustomize source does, from a script, so that it can post-process or combine overlays.",
	Value: Kustomize,
	Funcs: []Func{
		{"build", "kustomize.build(path) -> list", `Builds the kustomization in the directory path (resolved as load() resolves modules: "overlays/prod" next to the calling file, "//overlays/prod" at the root of its source, "@repo//overlays/prod" in source repo; bases elsewhere in the same source are fine) and returns its objects as dicts, in the order kustomize prints them. Remote bases and URLs are refused: a build reads only its source.`},
	},
}

func kustomizeBuild(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var dir string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "path", &dir); err != nil {
		return nil, err
	}
	tree, _, clean, err := lstar.ResolveTree(thread, dir)
	if err != nil {
		return nil, err
	}
	out, err := kustomize.Build(tree, clean)
	if err != nil {
		return nil, err
	}
	docs, err := decodeYAMLStream(out)
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(docs)
}
