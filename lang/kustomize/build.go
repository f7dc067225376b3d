//go:build !leanoperator

package kustomize

import (
	"fmt"
	"path"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build builds the kustomization in dir of files (clean, slash-separated
// relative paths) and returns the objects as a YAML stream, in the order
// `kustomize build` prints them.
func Build(files map[string][]byte, dir string) ([]byte, error) {
	if err := checkHermetic(files, path.Clean(dir)); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", path.Clean(dir), err)
	}
	dir = path.Clean("/" + dir)
	fs := filesys.MakeFsInMemory()
	for p, b := range files {
		if err := fs.WriteFile("/"+p, b); err != nil {
			return nil, err
		}
	}
	opts := krusty.MakeDefaultOptions()
	// As Flux builds: a kustomization may read files beside its directory
	// (../common/ns.yaml), not only directories; the in-memory tree holds
	// only the source, and checkHermetic refuses paths above its root.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	// As the CLI: the kustomization's sortOptions, else the legacy order.
	opts.Reorder = krusty.ReorderOptionUnspecified
	k := krusty.MakeKustomizer(opts)
	rm, err := k.Run(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", display(dir), err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", display(dir), err)
	}
	return out, nil
}

func display(dir string) string {
	if dir == "/" {
		return "."
	}
	return dir[1:]
}
