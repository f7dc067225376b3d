package source

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// A Resolver turns the sources of a spec into snapshots, the one way the
// CLI and the operator read them: each source is read by the provider of
// its kind, and its snapshot's revision is made here, so that both see
// one spec at the same input digests. Kustomize sources are left to the
// engine, which builds them from the snapshots they name.
//
// The operator gives the providers of a cluster: git with the credentials
// of a ManifestSync's secretRefs, and object readers over its caches. The
// CLI gives Local: the --source overrides and the copies beside the sync
// file, read before any provider.
type Resolver struct {
	// Namespace is the ManifestSync's: where object sources and object
	// sets without one read.
	Namespace string
	// Git fetches git sources; nil fails them with ErrGitNotWired.
	Git GitFetcher
	// Helm fetches the charts of helm sources, and the dependencies of a
	// chart in another source; nil fails them with ErrHelmNotWired.
	Helm HelmFetcher
	// OCI fetches oci sources; nil fails them with ErrOCINotWired.
	OCI OCIFetcher
	// HTTP fetches http sources; nil fails them with ErrHTTPNotWired.
	HTTP HTTPFetcher
	// Decrypt, when set, is given the snapshot of every source with files
	// (read by a provider or from a local copy, its revision and refs
	// made) and returns the one the engine sees: spec.decryption's SOPS
	// files decrypted, their values in Snapshot.Decrypted. It must not
	// modify snap, which caches share. Its errors name the file.
	Decrypt func(ctx context.Context, name string, snap *engine.Snapshot) (*engine.Snapshot, error)
	// Objects gives the reader of an object or object set source. It is
	// asked per source, so that a source may read another cluster than
	// its neighbours. Nil fails those sources.
	Objects func(src *v1alpha1.Source) (ObjectReader, error)
	// Local, when set, reads the sources it has a copy of in place of
	// their providers.
	Local *Local
	// Observe, when set, is told of every source a provider read ("git",
	// "object" or "objects"; not kustomize sources, nor local copies):
	// how long it took and how it ended.
	Observe func(src *v1alpha1.Source, kind string, took time.Duration, err error)
}

// GitFetcher fetches a git source; its errors name the source (source
// "NAME": git URL (REF): ...). git.Provider is the one with go-git.
type GitFetcher interface {
	FetchGit(ctx context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error)
}

// HelmFetcher fetches a helm source (package helm/charts says what its
// snapshot holds): of the chart form when dir is nil, else of the source
// form, dir being the chart's directory in the source it names, whose
// dependencies are added. Its errors name the source.
type HelmFetcher interface {
	FetchHelm(ctx context.Context, name string, src v1alpha1.HelmSource, dir *engine.Snapshot) (*engine.Snapshot, error)
}

// OCIFetcher fetches an oci source (package oci's Provider): the
// artifact's files under its path, at revision TAG@sha256:DIGEST, its
// signature verified when the source asks. Its errors name the source.
type OCIFetcher interface {
	FetchOCI(ctx context.Context, name string, src v1alpha1.OCISource) (*engine.Snapshot, error)
}

// HTTPFetcher fetches an http source (package httpsrc's Provider): the
// archive's files under its path. Its errors name the source.
type HTTPFetcher interface {
	FetchHTTP(ctx context.Context, name string, src v1alpha1.HTTPSource) (*engine.Snapshot, error)
}

// Secrets reads the data of a Secret of the ManifestSync's namespace that
// a source names (secretRef, verify.secretRef): in the operator as the
// ManifestSync's service account, uncached; in the CLI from a file beside
// the sync file. Its errors name the Secret, never its data.
type Secrets func(ctx context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error)

// VerifyError is the failure of a source's verify: the commit, tag or
// artifact read carries no signature by the keys of its Secret. The
// operator reports it as reason SourceVerifyFailed; nothing is applied.
type VerifyError struct {
	// Source is the source's name.
	Source string
	// What names what was read: "commit 1a2b3c…", "tag v1.2 (1a2b…)",
	// "artifact oci://host/repo@sha256:…".
	What string
	// Keys names the key set: "Secret NAMESPACE/NAME" (or the file the
	// CLI read), never a key. An oci source's provider may leave it empty:
	// the Resolver names the Secret of verify.secretRef in its Namespace.
	Keys string
	// Err says why (unsigned, signed by another key, a bad signature).
	Err error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("source %q: %s: not verified with the keys of %s: %v", e.Source, e.What, e.Keys, e.Err)
}

func (e *VerifyError) Unwrap() error { return e.Err }

// An ObjectReader reads objects of a cluster for object and object set
// sources. The operator implements it over its caches, as the
// ManifestSync's service account, within the allow-list; its errors name
// the objects (Kind namespace/name).
type ObjectReader interface {
	// Get returns the object o names; o.Namespace is set.
	Get(ctx context.Context, o v1alpha1.ObjectSource) (map[string]any, error)
	// List returns the objects set selects, in any order; source is the
	// name of the object set source.
	List(ctx context.Context, source string, set *engine.ObjectSet) ([]map[string]any, error)
}

// ErrGitNotWired is the error of a git source without a GitFetcher.
var ErrGitNotWired = errors.New("git sources are not wired yet")

// ErrHelmNotWired is the error of a helm source without a HelmFetcher.
var ErrHelmNotWired = errors.New("helm sources are not wired")

// ErrOCINotWired is the error of an oci source without an OCIFetcher.
var ErrOCINotWired = errors.New("oci sources are not wired")

// ErrHTTPNotWired is the error of an http source without an HTTPFetcher.
var ErrHTTPNotWired = errors.New("http sources are not wired")

// Error is the failure to read spec.sources[Index]. Its message names the
// source.
type Error struct {
	Index int
	Name  string
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Resolve returns the snapshot of every source but kustomize sources, by
// name, with the refs each reads (see readRefs: a kustomize source that
// reads refs gets a snapshot of them alone). The first source that fails
// stops it with an *Error. A helm source of the source form is read after
// the source it names.
func (r *Resolver) Resolve(ctx context.Context, sources []v1alpha1.Source) (map[string]*engine.Snapshot, error) {
	snaps := map[string]*engine.Snapshot{}
	var later []int // helm sources of the source form
	for i := range sources {
		if h := sources[i].Helm; h != nil && h.Source != "" {
			later = append(later, i)
			continue
		}
		if err := r.resolveInto(ctx, snaps, i, &sources[i]); err != nil {
			return nil, err
		}
	}
	// A chart may live in another helm source's files: read each once the
	// source it names is read.
	for len(later) > 0 {
		var next []int
		for _, i := range later {
			if slices.ContainsFunc(later, func(j int) bool { return sources[j].Name == sources[i].Helm.Source }) {
				next = append(next, i)
				continue
			}
			if err := r.resolveInto(ctx, snaps, i, &sources[i]); err != nil {
				return nil, err
			}
		}
		if len(next) == len(later) {
			i := next[0]
			return nil, &Error{Index: i, Name: sources[i].Name, Err: fmt.Errorf("source %q: helm sources name each other in a cycle", sources[i].Name)}
		}
		later = next
	}
	return snaps, nil
}

// resolveInto reads sources[i], src, and its refs into snaps.
func (r *Resolver) resolveInto(ctx context.Context, snaps map[string]*engine.Snapshot, i int, src *v1alpha1.Source) error {
	snap, err := r.resolve(ctx, src, snaps)
	if err == nil {
		snap, err = r.readRefs(ctx, src, snap)
	}
	if err == nil && r.Decrypt != nil && snap != nil && snap.Files != nil {
		snap, err = r.Decrypt(ctx, src.Name, snap)
	}
	if err != nil {
		return &Error{Index: i, Name: src.Name, Err: err}
	}
	if snap != nil {
		snaps[src.Name] = snap
	}
	return nil
}

// resolve reads one source: nil, nil for a kustomize source. snaps are
// the sources read before it.
func (r *Resolver) resolve(ctx context.Context, src *v1alpha1.Source, snaps map[string]*engine.Snapshot) (*engine.Snapshot, error) {
	if r.Local != nil {
		snap, ok, err := r.Local.read(ctx, r, src)
		if ok || err != nil {
			return snap, err
		}
	}
	var kind string
	switch {
	case src.Object != nil:
		kind = "object"
	case src.Objects != nil:
		kind = "objects"
	case src.Git != nil:
		kind = "git"
	case src.OCI != nil:
		kind = "oci"
	case src.HTTP != nil:
		kind = "http"
	case src.Helm != nil:
		kind = "helm"
	default:
		return nil, nil
	}
	start := time.Now()
	snap, err := r.read(ctx, src, snaps)
	if r.Observe != nil {
		r.Observe(src, kind, time.Since(start), err)
	}
	return snap, err
}

// read reads src through its provider.
func (r *Resolver) read(ctx context.Context, src *v1alpha1.Source, snaps map[string]*engine.Snapshot) (*engine.Snapshot, error) {
	switch {
	case src.Git != nil:
		return r.fetchGit(ctx, src.Name, *src.Git)
	case src.OCI != nil:
		if r.OCI == nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, ErrOCINotWired)
		}
		snap, err := r.OCI.FetchOCI(ctx, src.Name, *src.OCI)
		if ve, ok := errors.AsType[*VerifyError](err); ok && ve.Keys == "" && src.OCI.Verify != nil {
			// The provider knows the Secret's name, the Resolver its
			// namespace.
			ve.Keys = "Secret " + r.Namespace + "/" + src.OCI.Verify.SecretRef.Name
		}
		return snap, err
	case src.HTTP != nil:
		if r.HTTP == nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, ErrHTTPNotWired)
		}
		return r.HTTP.FetchHTTP(ctx, src.Name, *src.HTTP)
	case src.Helm != nil:
		return r.fetchHelm(ctx, src.Name, *src.Helm, snaps)
	}
	snap, err := r.readObjects(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", src.Name, err)
	}
	return snap, nil
}

func (r *Resolver) fetchGit(ctx context.Context, name string, g v1alpha1.GitSource) (*engine.Snapshot, error) {
	if r.Git == nil {
		return nil, fmt.Errorf("source %q: %w", name, ErrGitNotWired)
	}
	return r.Git.FetchGit(ctx, name, g)
}

// fetchHelm reads a helm source: the chart through the HelmFetcher, or,
// for the source form, the chart's directory in the source it names,
// whose dependencies the HelmFetcher adds.
func (r *Resolver) fetchHelm(ctx context.Context, name string, h v1alpha1.HelmSource, snaps map[string]*engine.Snapshot) (*engine.Snapshot, error) {
	if r.Helm == nil {
		return nil, fmt.Errorf("source %q: %w", name, ErrHelmNotWired)
	}
	if h.Source == "" {
		return r.Helm.FetchHelm(ctx, name, h, nil)
	}
	dir, err := chartDir(snaps[h.Source], h)
	if err != nil {
		return nil, fmt.Errorf("source %q: helm: %w", name, err)
	}
	return r.Helm.FetchHelm(ctx, name, h, dir)
}

// chartDir is the subtree h.Path of from, the snapshot of the source
// h.Source names, which must hold a Chart.yaml.
func chartDir(from *engine.Snapshot, h v1alpha1.HelmSource) (*engine.Snapshot, error) {
	if from == nil {
		return nil, fmt.Errorf("source %q: no such source with files (a git, helm or local source)", h.Source)
	}
	if from.Files == nil {
		return nil, fmt.Errorf("source %q: holds objects, not files: a chart is read from a git or helm source", h.Source)
	}
	dir := path.Clean("/" + h.Path)[1:] // "" for the whole source; never leaves it
	if h.Path != "" && strings.Contains("/"+h.Path+"/", "/../") {
		return nil, fmt.Errorf("path %q: leaves source %q", h.Path, h.Source)
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	files := map[string][]byte{}
	for p, b := range from.Files {
		if rel, ok := strings.CutPrefix(p, prefix); ok {
			files[rel] = b
		}
	}
	if files["Chart.yaml"] == nil {
		return nil, fmt.Errorf("%s: no Chart.yaml in source %q", from.FileName(h.Source, path.Join(dir, "Chart.yaml")), h.Source)
	}
	origin := ""
	if from.Origin != "" && dir != "" {
		origin = filepath.Join(from.Origin, filepath.FromSlash(dir))
	} else if from.Origin != "" {
		origin = from.Origin
	}
	return &engine.Snapshot{Revision: from.Revision, Files: files, Time: from.Time, Origin: origin, Pending: from.Pending, Decrypted: from.Decrypted}, nil
}

// readObjects reads an object or object set source through its reader.
func (r *Resolver) readObjects(ctx context.Context, src *v1alpha1.Source) (*engine.Snapshot, error) {
	var set *engine.ObjectSet
	if src.Objects != nil {
		var err error
		if set, err = engine.CompileObjectSet(src.Objects, r.Namespace); err != nil {
			return nil, err
		}
	}
	if r.Objects == nil {
		return nil, errors.New("no object reader")
	}
	reader, err := r.Objects(src)
	if err != nil {
		return nil, err
	}
	if set != nil {
		objs, err := reader.List(ctx, src.Name, set)
		if err != nil {
			return nil, err
		}
		return engine.ObjectSetSnapshot(objs), nil
	}
	o := *src.Object
	if o.Namespace == "" {
		o.Namespace = r.Namespace
	}
	obj, err := reader.Get(ctx, o)
	if err != nil {
		return nil, err
	}
	return ObjectSnapshot(obj), nil
}
