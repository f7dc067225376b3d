package engine

import (
	"errors"
	"fmt"

	"github.com/manifestsync/manifestsync/lang/kustomize"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

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

// refsOnly tells whether snap is what the resolver gives a kustomize
// source that reads refs: the refs alone, which the build carries.
func refsOnly(snap *Snapshot) bool {
	return snap.Refs != nil && snap.Files == nil && snap.Object == nil && snap.Objects == nil
}

// buildKustomizeSource builds kustomize source s from base; refs, when
// not nil, is the snapshot of the refs it read: the build carries them,
// and their digest starts its revision ("refs:sha256:HEX@" the base's).
func buildKustomizeSource(s *v1alpha1.Source, base, refs *Snapshot) (*Snapshot, error) {
	snap, err := KustomizeBuild(base, s.Kustomize.Path)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", s.Name, err)
	}
	if refs != nil {
		snap.Refs = refs.Refs
		snap.Revision = refs.Revision + "@" + snap.Revision
	}
	return snap, nil
}

// sourceObjects returns the input objects of a git or kustomize source s
// whose snapshot is snap. A git source whose path holds a kustomization
// (kustomization.yaml, kustomization.yml or Kustomization, as kustomize
// looks for them) is built, as Flux and Argo CD build it, unless its
// kustomize is false; its files stay as they are for load() and file
// reads. Any other is its YAML and JSON files. Then the objects are
// substituted when s asks for it (see substitute).
func (e *evaluation) sourceObjects(s *v1alpha1.Source, snap *Snapshot) ([]Input, error) {
	from := snap
	if k := buildOf(s).Kustomize; s.Git != nil && (k == nil || *k) && kustomize.HasKustomization(snap.Files, ".") {
		built, err := KustomizeBuild(snap, ".")
		if errors.Is(err, kustomize.ErrLeavesTree) && s.Git.Path != "" {
			return nil, fmt.Errorf("source %q: %w (the tree of a git source is its path: for a base elsewhere in the repository, read it whole with a git source and build %s with a kustomize source)", s.Name, err, s.Git.Path)
		}
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", s.Name, err)
		}
		from = built
	}
	objs, err := objectsOf(s.Name, from, from.Paths())
	if err != nil {
		return nil, err
	}
	vars, err := substituteVars(s, snap.Refs)
	if err != nil || vars == nil {
		return objs, err
	}
	return objs, substitute(s.Name, objs, vars, e.opts.Limits.WithDefaults().MaxBytes)
}
