package source

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/lang/kustomize"
)

// Local is the CLI's provider: it reads a source from an override
// (--source NAME=DIR|FILE|URL[@REF]), else from its copy beside the sync
// file (NAME/ or NAME.yaml). A git, oci or http source read from a local
// path has the revision local:PATH@DIGEST (PATH as given, or the copy's name beside
// the sync file), so that the inputs show it is not the revision the spec
// pins; a helm source's is CHART@VERSION@local:PATH@DIGEST, and the
// dependencies its Chart.lock pins that its charts/ lacks are fetched. A
// URL fetches the git source from there, with the spec's path.
type Local struct {
	dir       string
	tree      Tree
	overrides map[string]string
	remotes   map[string]v1alpha1.GitSource // the sources overridden by a URL
}

// NewLocal makes the provider of the copies beside a sync file in dir,
// read from tree, and of overrides (by source name; those of names that
// sources does not have are ignored), read from the file system. An
// override URL of a source that is not a git source, or with a REF that
// does not parse, is an error naming the flag.
func NewLocal(dir string, tree Tree, overrides map[string]string, sources []v1alpha1.Source) (*Local, error) {
	l := &Local{dir: dir, tree: tree, overrides: overrides, remotes: map[string]v1alpha1.GitSource{}}
	for _, s := range sources {
		p, ok := overrides[s.Name]
		if !ok || !IsGitURL(p) {
			continue
		}
		if s.Git == nil {
			return nil, fmt.Errorf("--source %s=%s: source %q is not a git source", s.Name, p, s.Name)
		}
		g, err := gitOverride(*s.Git, p)
		if err != nil {
			return nil, fmt.Errorf("--source %s=%s: %w", s.Name, p, err)
		}
		l.remotes[s.Name] = g
	}
	return l, nil
}

// LocalError is a local copy, an override or a file beside the sync file
// that cannot be read: the user's input, not the source, is wrong.
type LocalError struct{ Err error }

func (e *LocalError) Error() string { return e.Err.Error() }
func (e *LocalError) Unwrap() error { return e.Err }

// read reads src from its override or copy; ok is false when it has
// neither (or is a kustomize source without an override).
func (l *Local) read(ctx context.Context, r *Resolver, src *v1alpha1.Source) (snap *engine.Snapshot, ok bool, err error) {
	if g, ok := l.remotes[src.Name]; ok {
		snap, err := r.fetchGit(ctx, src.Name, g)
		return snap, true, err
	}
	if p, ok := l.overrides[src.Name]; ok {
		dir, name := givenTree(p)
		snap, err := l.readCopy(ctx, WorkTree{}, r, src, dir, name, p)
		if err == nil && name == "." {
			err = readCheckout(src, p, snap)
		}
		return snap, true, err
	}
	if src.Kustomize != nil {
		return nil, false, nil // built by the engine
	}
	p := l.Copy(src.Name)
	if p == "" {
		return nil, false, nil
	}
	name := filepath.Base(p)
	// A copy is named from the sync file's directory, wherever eval runs.
	snap, err = l.readCopy(ctx, l.tree, r, src, l.dir, name, name)
	return snap, true, err
}

// Copy is the local copy of source name beside the sync file, NAME/ or
// NAME.yaml; "" when there is none.
func (l *Local) Copy(name string) string {
	for _, p := range []string{filepath.Join(l.dir, name), filepath.Join(l.dir, name+".yaml")} {
		if l.tree.Exists(p) {
			return p
		}
	}
	return ""
}

// readCopy reads src from name, a file or a directory inside dir of t,
// shown as shown in a local revision.
func (l *Local) readCopy(ctx context.Context, t Tree, r *Resolver, src *v1alpha1.Source, dir, name, shown string) (*engine.Snapshot, error) {
	var (
		snap *engine.Snapshot
		err  error
	)
	if src.Objects != nil {
		snap, err = readObjectSet(t, r.Namespace, src, dir, name)
	} else {
		snap, err = t.Read(dir, name, src.Object != nil)
	}
	if err != nil {
		return nil, &LocalError{fmt.Errorf("source %q: %w", src.Name, err)}
	}
	if src.Git != nil || src.Helm != nil || src.OCI != nil || src.HTTP != nil {
		snap.Revision = LocalPrefix + filepath.ToSlash(shown) + "@" + snap.Revision
	}
	if src.Helm != nil && snap.Files != nil {
		// A chart's copy gets the dependencies its Chart.lock pins and
		// its charts/ lacks, as the chart would.
		if r.Helm == nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, ErrHelmNotWired)
		}
		return r.Helm.FetchHelm(ctx, src.Name, *src.Helm, snap)
	}
	return snap, nil
}

// readCheckout gives snap, read from dir for git source src, the
// repository's tree its kustomizations are built in (Snapshot.Root), as
// the git provider does, when src has a path holding one and dir is that
// path inside a checkout: the directory above dir by the path holds .git
// (--source app=~/src/fleet/overlays/prod for path overlays/prod reads
// ~/src/fleet as the repository). The tree is read within the default
// limits, and its digest is in the revision. Otherwise dir is the path's
// files alone, as ever.
func readCheckout(src *v1alpha1.Source, dir string, snap *engine.Snapshot) error {
	if src.Git == nil || src.Git.Path == "" || (src.Git.Kustomize != nil && !*src.Git.Kustomize) || !kustomize.Holds(snap.Files) {
		return nil
	}
	root := filepath.Clean(dir)
	for _, elem := range slices.Backward(strings.Split(path.Clean(src.Git.Path), "/")) {
		if filepath.Base(root) != elem {
			return nil
		}
		root = filepath.Dir(root)
	}
	if _, err := os.Lstat(filepath.Join(root, ".git")); err != nil {
		return nil
	}
	tree, err := Dir(root, Limits{})
	if err != nil {
		return &LocalError{fmt.Errorf("source %q: the checkout %s, in which the kustomization of %s is built: %w", src.Name, root, dir, err)}
	}
	snap.Root = tree.Files
	snap.Revision = LocalPrefix + filepath.ToSlash(dir) + "@" + tree.Revision
	return nil
}

// LocalPrefix starts the revision of a git, oci or http source read from
// a local path.
const LocalPrefix = "local:"

// readObjectSet reads an object set source from name, a file or a
// directory inside dir in t: the objects of its files that the set
// selects, as the operator would select them in a cluster.
func readObjectSet(t Tree, namespace string, src *v1alpha1.Source, dir, name string) (*engine.Snapshot, error) {
	set, err := engine.CompileObjectSet(src.Objects, namespace)
	if err != nil {
		return nil, err
	}
	files, err := t.Read(dir, name, false)
	if err != nil {
		return nil, err
	}
	return ObjectSetFrom(files, set)
}

// givenTree splits a path given on the command line into the tree it is
// read in and its name there: a directory is its own tree, a file is read
// inside its directory.
func givenTree(p string) (dir, name string) {
	if info, err := os.Stat(p); err == nil && info.IsDir() {
		return p, "."
	}
	return filepath.Dir(p), filepath.Base(p)
}

// Tree is where the local copies beside a sync file are read: the working
// tree, or a commit of its repository (diff --base).
type Tree interface {
	// Exists tells whether the path p exists.
	Exists(p string) bool
	// Read reads name, a directory or a file inside the tree dir: a
	// directory as a tree, a file as an object when object is set, as a
	// one-file tree otherwise.
	Read(dir, name string, object bool) (*engine.Snapshot, error)
}

// WorkTree is the file system. A file is read inside its directory, which
// it may not leave (see ReadFile).
type WorkTree struct{}

// Exists implements Tree.
func (WorkTree) Exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// Read implements Tree.
func (WorkTree) Read(dir, name string, object bool) (*engine.Snapshot, error) {
	info, err := Stat(dir, name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return Dir(filepath.Join(dir, name), Limits{})
	}
	if object {
		return ObjectFileIn(dir, name)
	}
	b, err := ReadFile(dir, name)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{name: b}
	return &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}, nil
}

// readRef reads a ref from its copy beside the sync file, NAME.yaml (the
// Secret of a git source's secretRef is read there too); no copy is
// ErrNotFound, a copy of another kind an error naming it.
func (l *Local) readRef(ref Ref) (map[string]any, error) {
	p := filepath.Join(l.dir, ref.Name+".yaml")
	if !l.tree.Exists(p) {
		return nil, fmt.Errorf("no local copy at %s: %w", p, ErrNotFound)
	}
	snap, err := l.tree.Read(l.dir, ref.Name+".yaml", true)
	if err != nil {
		return nil, &LocalError{err}
	}
	if kind, _ := snap.Object["kind"].(string); kind != ref.Kind || snap.Object["apiVersion"] != "v1" {
		return nil, &LocalError{fmt.Errorf("%s holds a %s, want a v1 %s", p, kind, ref.Kind)}
	}
	return snap.Object, nil
}
