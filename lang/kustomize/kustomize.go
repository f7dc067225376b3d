// Package kustomize runs `kustomize build` over an in-memory file tree with
// sigs.k8s.io/kustomize/api: the kustomize source of a ManifestSync and the
// Starlark kustomize.build both use it, and git sources whose path holds a
// kustomization. Remote bases, plugins and exec functions are off, and a
// kustomization that refers to anything remote (a git base, a URL) or to
// a path above the tree's root is refused before the build, so a build
// reads nothing but the tree. Files outside a kustomization's directory
// but inside the tree may be read, as Flux allows (kustomize's
// --load-restrictor LoadRestrictionsNone).
//
// It is part of the language layer: the stdlib uses it, so it must not
// import the engine.
package kustomize

import (
	"path"
	"slices"
)

// HasKustomization tells whether dir of files holds a kustomization, by
// the names kustomize looks for.
func HasKustomization(files map[string][]byte, dir string) bool {
	for _, n := range kustomizationNames {
		if _, ok := files[path.Join(dir, n)]; ok {
			return true
		}
	}
	return false
}

// Holds tells whether any directory of files holds a kustomization: a
// git path holding one (its own, or one below it that is built) is built
// in its whole repository.
func Holds(files map[string][]byte) bool {
	for p := range files {
		if slices.Contains(kustomizationNames, path.Base(p)) {
			return true
		}
	}
	return false
}
