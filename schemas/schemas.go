// Package schemas holds the CUE schemas shipped in the binary, one tree
// per builtin set:
//
//   - k8s: the core Kubernetes kinds, generated from the k8s.io/api Go types
//     by hack/gen-k8s-schemas.sh (`make generate`); do not edit it by hand.
//   - manifestsync: the ManifestSync resource itself.
//
// Each set is a CUE package at the root of its tree whose definitions
// #<Kind> (and, for k8s, #Object) lang/cue unifies objects with.
//
// It holds data only and must not import anything of this module.
package schemas

import (
	"embed"
	"io/fs"
	"sort"
)

// FS holds every builtin set, each in a directory named after it.
//
//go:embed k8s manifestsync
var FS embed.FS

// Names lists the builtin sets.
func Names() []string {
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}
