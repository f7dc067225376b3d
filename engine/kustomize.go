package engine

import "github.com/manifestsync/manifestsync/lang/kustomize"

// KustomizeBuild runs `kustomize build` over dir of a snapshot, entirely in
// memory (see package kustomize). The result is a snapshot holding one file,
// "kustomize.yaml", with the built objects; its revision is the base's.
func KustomizeBuild(base *Snapshot, dir string) (*Snapshot, error) {
	out, err := kustomize.Build(base.Files, dir)
	if err != nil {
		return nil, err
	}
	return &Snapshot{
		Revision: base.Revision,
		Time:     base.Time,
		Files:    map[string][]byte{"kustomize.yaml": out},
	}, nil
}
