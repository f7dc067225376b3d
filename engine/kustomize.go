package engine

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/lang/kustomize"
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

// sourceObjects returns the input objects of a git, oci, http or
// kustomize source s whose snapshot is snap. A git, oci or http source is
// read as Flux reads a path,
// unless its kustomize is false (then it is its YAML and JSON files):
// when the path holds a kustomization (kustomization.yaml,
// kustomization.yml or Kustomization, as kustomize looks for them), the
// objects are its build; else every directory below that holds one is
// built (the topmost ones: Flux's generated kustomization names them and
// not what is below), and the other YAML and JSON files are read as they
// are. Its files stay as they are for load() and file reads. Then the
// objects are substituted when s asks for it (see substitute).
func (e *evaluation) sourceObjects(s *v1alpha1.Source, snap *Snapshot) ([]Input, error) {
	var objs []Input
	if _, built := buildPath(s); built && (buildOf(s).Kustomize == nil || *buildOf(s).Kustomize) { // kustomize: false reads the files as they are
		var err error
		if objs, err = buildGitPath(s, snap); err != nil {
			return nil, err
		}
	} else {
		var err error
		if objs, err = objectsOf(s.Name, snap, snap.Paths()); err != nil {
			return nil, err
		}
	}
	vars, err := substituteVars(s, snap.Refs)
	if err != nil || vars == nil {
		return objs, err
	}
	return objs, substitute(s.Name, objs, vars, e.opts.Limits.WithDefaults().MaxBytes)
}

// buildGitPath reads the objects of git, oci or http source s as Flux
// reads its path (see sourceObjects).
func buildGitPath(s *v1alpha1.Source, snap *Snapshot) ([]Input, error) {
	dirs := kustomizationDirs(snap)
	var plain []string
	for _, p := range snap.Paths() {
		if !slices.ContainsFunc(dirs, func(d string) bool { return d == "." || strings.HasPrefix(p, d+"/") }) {
			plain = append(plain, p)
		}
	}
	objs, err := objectsOf(s.Name, snap, plain)
	if err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		built, err := buildGitDir(s, snap, dir)
		p, _ := buildPath(s)
		if errors.Is(err, kustomize.ErrLeavesTree) && p != "" && snap.Root == nil {
			if s.Git == nil {
				return nil, fmt.Errorf("source %q: %w (this copy holds only the path %s)", s.Name, err, p)
			}
			return nil, fmt.Errorf("source %q: %w (this copy holds only the path %s: give the repository's checkout at that path, --source %s=CHECKOUT/%s, to build it in the whole repository)", s.Name, err, p, s.Name, path.Clean(p))
		}
		if errors.Is(err, kustomize.ErrLeavesTree) && snap.Root != nil {
			return nil, fmt.Errorf("source %q: %w (out of the %s)", s.Name, err, treeName(s))
		}
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", s.Name, err)
		}
		more, err := objectsOf(s.Name, built, built.Paths())
		if err != nil {
			return nil, err
		}
		objs = append(objs, more...)
	}
	return objs, nil
}

// buildGitDir builds dir of the path of git, oci or http source s: in the
// whole repository, artifact or archive when snap carries it
// (Snapshot.Root), as Flux and Argo CD build a path of a whole checkout,
// so that only what leaves it is refused; else in the path's files.
func buildGitDir(s *v1alpha1.Source, snap *Snapshot, dir string) (*Snapshot, error) {
	if snap.Root == nil {
		return KustomizeBuild(snap, dir)
	}
	p, _ := buildPath(s)
	return KustomizeBuild(&Snapshot{Revision: snap.Revision, Time: snap.Time, Files: snap.Root}, path.Join(p, dir))
}

// buildPath is the path of a source whose files are built as Flux builds
// a path (git, oci and http sources), and whether s is one.
func buildPath(s *v1alpha1.Source) (string, bool) {
	switch {
	case s.Git != nil:
		return s.Git.Path, true
	case s.OCI != nil:
		return s.OCI.Path, true
	case s.HTTP != nil:
		return s.HTTP.Path, true
	}
	return "", false
}

// treeName is what the whole tree of a built source is called.
func treeName(s *v1alpha1.Source) string {
	switch {
	case s.OCI != nil:
		return "artifact"
	case s.HTTP != nil:
		return "archive"
	}
	return "repository"
}

// kustomizationDirs are the directories of snap that Flux builds: its
// root (".") when it holds a kustomization, else the topmost directories
// below it that hold one, in order.
func kustomizationDirs(snap *Snapshot) []string {
	if kustomize.HasKustomization(snap.Files, ".") {
		return []string{"."}
	}
	var all []string
	for _, p := range snap.Paths() {
		if d := path.Dir(p); !slices.Contains(all, d) && kustomize.HasKustomization(snap.Files, d) {
			all = append(all, d)
		}
	}
	var dirs []string
	for _, d := range all {
		if !slices.ContainsFunc(all, func(top string) bool { return strings.HasPrefix(d, top+"/") }) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}
