package engine

import (
	"fmt"
	"path"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// KustomizeBuild runs `kustomize build` over dir of a snapshot, entirely in
// memory: remote bases, plugins and exec functions are off, so a build reads
// nothing but the snapshot. The result is a snapshot holding one file,
// "kustomize.yaml", with the built objects; its revision is the base's.
func KustomizeBuild(base *Snapshot, dir string) (*Snapshot, error) {
	dir = path.Clean("/" + dir)
	fs := filesys.MakeFsInMemory()
	for p, b := range base.Files {
		if err := fs.WriteFile("/"+p, b); err != nil {
			return nil, fmt.Errorf("kustomize: %w", err)
		}
	}
	opts := krusty.MakeDefaultOptions()
	k := krusty.MakeKustomizer(opts)
	rm, err := k.Run(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir[1:], err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir[1:], err)
	}
	return &Snapshot{
		Revision: base.Revision,
		Time:     base.Time,
		Files:    map[string][]byte{"kustomize.yaml": out},
	}, nil
}
