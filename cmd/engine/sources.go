package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// resolveSources takes the snapshot of every source the engine does not
// build itself: an override from --source (a directory, a file or a Git
// URL), else a local copy beside the sync file (NAME/ or NAME.yaml), else,
// for a git source, a fetch of what the spec names. An override of a source
// the sync file does not have is a usage error. A git source read from a
// local copy has the revision local:PATH@DIGEST (PATH as given to
// --source, or the copy's name beside the sync file), so that the inputs
// show that it is not the revision the spec pins (see localSources).
func resolveSources(ctx context.Context, sf *engine.SyncFile, overrides []string) (map[string]*engine.Snapshot, error) {
	given, err := parseSourceFlags(overrides)
	if err != nil {
		return nil, err
	}
	for name, p := range given {
		if !slices.ContainsFunc(sf.Sync.Spec.Sources, func(s v1alpha1.Source) bool { return s.Name == name }) {
			return nil, usageErr("--source %s=%s: %s has no source named %q", name, p, sf.Name, name)
		}
	}
	return readSources(ctx, sf, given)
}

// parseSourceFlags reads --source NAME=DIR|FILE|URL[@REF] values into the
// path or URL given for each source name.
func parseSourceFlags(values []string) (map[string]string, error) {
	given := map[string]string{}
	for _, o := range values {
		name, p, ok := strings.Cut(o, "=")
		if !ok || name == "" || p == "" {
			return nil, usageErr("--source %q: want NAME=DIR, NAME=FILE or NAME=URL[@REF]", o)
		}
		if _, dup := given[name]; dup {
			return nil, usageErr("--source %s: source %q is given twice", o, name)
		}
		given[name] = p
	}
	return given, nil
}

// readSources is resolveSources with the overrides parsed, by source name;
// those of names the sync file does not have are not read.
func readSources(ctx context.Context, sf *engine.SyncFile, given map[string]string) (map[string]*engine.Snapshot, error) {
	return readSourcesIn(ctx, workTree{}, sf, given)
}

// localTree is where the local copies beside a sync file are read: the
// working tree, or a commit of its repository (diff --base). Overrides
// given with --source and the secrets of git sources are the user's, and
// always read from the working tree.
type localTree interface {
	// exists tells whether the path p exists.
	exists(p string) bool
	// read reads name inside the tree dir, as readLocal does.
	read(dir, name string, object bool) (*engine.Snapshot, error)
}

// workTree is the file system.
type workTree struct{}

func (workTree) exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func (workTree) read(dir, name string, object bool) (*engine.Snapshot, error) {
	return readLocal(dir, name, object)
}

// readSourcesIn is readSources with the local copies read from t.
func readSourcesIn(ctx context.Context, t localTree, sf *engine.SyncFile, given map[string]string) (map[string]*engine.Snapshot, error) {
	spec := &sf.Sync.Spec
	dir := filepath.Dir(sf.Name)
	snaps := map[string]*engine.Snapshot{}
	for i, s := range spec.Sources {
		var (
			snap *engine.Snapshot
			err  error
		)
		p, overridden := given[s.Name]
		switch {
		case overridden && isGitURL(p):
			if s.Git == nil {
				return nil, usageErr("--source %s=%s: source %q is not a git source", s.Name, p, s.Name)
			}
			g, perr := gitOverride(*s.Git, p)
			if perr != nil {
				return nil, usageErr("--source %s=%s: %w", s.Name, p, perr)
			}
			snap, err = fetchGit(ctx, dir, s.Name, g)
		case overridden:
			gdir, gname := givenTree(p)
			snap, err = readLocalSource(workTree{}, sf, s, gdir, gname)
			localRevision(s, p, snap)
		case s.Kustomize != nil:
			continue // built by the engine
		case conventionalPathIn(t, dir, s.Name) != "":
			local := filepath.Base(conventionalPathIn(t, dir, s.Name))
			snap, err = readLocalSource(t, sf, s, dir, local)
			localRevision(s, local, snap) // named from the sync file's directory, wherever eval runs
		case s.Git != nil:
			snap, err = fetchGit(ctx, dir, s.Name, *s.Git)
		default:
			return nil, failed(fmt.Errorf("source %q: no local copy: give --source %s=FILE, or put it at %s.yaml", s.Name, s.Name, filepath.Join(dir, s.Name)))
		}
		if err != nil {
			return nil, &sourceError{index: i, err: err}
		}
		snaps[s.Name] = snap
	}
	return snaps, nil
}

// localRevision marks the snapshot of a git source read from the local
// path p: local:P@DIGEST, where DIGEST is that of the files read.
func localRevision(s v1alpha1.Source, p string, snap *engine.Snapshot) {
	if s.Git != nil && snap != nil {
		snap.Revision = localPrefix + filepath.ToSlash(p) + "@" + snap.Revision
	}
}

// localPrefix starts the revision of a git source read locally.
const localPrefix = "local:"

// localSources lists, one line each, the git sources read from a local
// copy found beside the sync file, which replaces the revision the spec
// pins; a copy given with --source is the user's explicit choice and is
// not listed.
func localSources(sf *engine.SyncFile, snaps map[string]*engine.Snapshot, overrides []string) []string {
	given := map[string]bool{}
	for _, o := range overrides {
		name, _, _ := strings.Cut(o, "=")
		given[name] = true
	}
	var out []string
	for _, s := range sf.Sync.Spec.Sources {
		snap := snaps[s.Name]
		if s.Git == nil || given[s.Name] || snap == nil || !strings.HasPrefix(snap.Revision, localPrefix) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(snap.Revision, localPrefix), "@")
		p := filepath.Join(filepath.Dir(sf.Name), name)
		out = append(out, fmt.Sprintf("source %q: read from the local copy %s, not fetched from %s at %s",
			s.Name, p, s.Git.URL, describeRef(s.Git.Ref)))
	}
	return out
}

// sourceError is the failure to read spec.sources[index]; it keeps the
// exit code of err, and lets vet name the source's line.
type sourceError struct {
	index int
	err   error
}

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

func readLocalSource(t localTree, sf *engine.SyncFile, s v1alpha1.Source, dir, name string) (*engine.Snapshot, error) {
	var (
		snap *engine.Snapshot
		err  error
	)
	if s.Objects != nil {
		snap, err = readObjectSet(t, sf, s, dir, name)
	} else {
		snap, err = t.read(dir, name, s.Object != nil)
	}
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("source %q: %w", s.Name, err)}
	}
	return snap, nil
}

// readObjectSet reads an object set source from name, a file or a
// directory inside dir in t: the objects of its files that the set
// selects, as the operator would select them in a cluster.
func readObjectSet(t localTree, sf *engine.SyncFile, s v1alpha1.Source, dir, name string) (*engine.Snapshot, error) {
	set, err := engine.CompileObjectSet(s.Objects, sf.Sync.Namespace)
	if err != nil {
		return nil, err
	}
	files, err := t.read(dir, name, false)
	if err != nil {
		return nil, err
	}
	return source.ObjectSetFrom(files, set)
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

func conventionalPath(dir, name string) string {
	return conventionalPathIn(workTree{}, dir, name)
}

// conventionalPathIn is the local copy of source name beside a sync file
// in dir, NAME/ or NAME.yaml, in t; "" when there is none.
func conventionalPathIn(t localTree, dir, name string) string {
	for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, name+".yaml")} {
		if t.exists(p) {
			return p
		}
	}
	return ""
}

// readLocal reads name, a directory or a file inside the tree dir (which it
// may not leave, see source.ReadFile): a directory as a tree, a file as an
// object for object sources, as a one-file tree otherwise.
func readLocal(dir, name string, object bool) (*engine.Snapshot, error) {
	info, err := source.Stat(dir, name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		return source.Dir(filepath.Join(dir, name), source.Limits{})
	}
	if object {
		return source.ObjectFileIn(dir, name)
	}
	b, err := source.ReadFile(dir, name)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{name: b}
	return &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}, nil
}

// isGitURL reports whether a --source value names a remote repository
// rather than a local path.
func isGitURL(p string) bool {
	return strings.Contains(p, "://") || scpLike.MatchString(p)
}

// scpLike matches the scp-like syntax of ssh remotes: user@host:path.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// gitOverride makes the source a --source URL[@REF] names: the spec's
// source with another URL and, when given, another ref; its path stays.
func gitOverride(spec v1alpha1.GitSource, value string) (v1alpha1.GitSource, error) {
	url, ref := splitRef(value)
	spec.URL = url
	if ref == "" {
		return spec, nil
	}
	r, err := parseRef(ref)
	if err != nil {
		return spec, err
	}
	spec.Ref = r
	return spec, nil
}

// splitRef splits URL@REF at the last "@" of the URL's path, so that the
// user of ssh://git@host/repo and git@host:repo is not taken for a ref.
func splitRef(value string) (url, ref string) {
	pathStart := 0
	if i := strings.Index(value, "://"); i >= 0 {
		if j := strings.Index(value[i+3:], "/"); j >= 0 {
			pathStart = i + 3 + j
		} else {
			return value, ""
		}
	} else if loc := scpLike.FindStringIndex(value); loc != nil {
		pathStart = loc[1]
	}
	if i := strings.LastIndex(value[pathStart:], "@"); i >= 0 {
		return value[:pathStart+i], value[pathStart+i+1:]
	}
	return value, ""
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// parseRef reads REF: tag:NAME, semver:RANGE, branch:NAME, commit:HASH, or
// a bare branch name or commit hash.
func parseRef(ref string) (v1alpha1.GitRef, error) {
	kind, value, ok := strings.Cut(ref, ":")
	if !ok {
		if commitHash.MatchString(ref) {
			return v1alpha1.GitRef{Commit: ref}, nil
		}
		return v1alpha1.GitRef{Branch: ref}, nil
	}
	if value == "" {
		return v1alpha1.GitRef{}, fmt.Errorf("ref %q: empty %s", ref, kind)
	}
	switch kind {
	case "tag":
		return v1alpha1.GitRef{Tag: value}, nil
	case "semver":
		return v1alpha1.GitRef{SemVer: value}, nil
	case "branch":
		return v1alpha1.GitRef{Branch: value}, nil
	case "commit":
		if !commitHash.MatchString(value) {
			return v1alpha1.GitRef{}, fmt.Errorf("ref %q: a commit is 7 to 40 lowercase hex digits", ref)
		}
		return v1alpha1.GitRef{Commit: value}, nil
	}
	return v1alpha1.GitRef{}, fmt.Errorf("ref %q: want tag:, semver:, branch: or commit: (or a bare branch or commit)", ref)
}

// fetchGit fetches a git source with the credentials of its secretRef,
// read from SECRET.yaml beside the sync file when it exists.
func fetchGit(ctx context.Context, dir, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	var auth *git.Auth
	if src.SecretRef != nil {
		p := filepath.Join(dir, src.SecretRef.Name+".yaml")
		if _, err := os.Lstat(p); err == nil {
			data, err := readSecretData(dir, src.SecretRef.Name+".yaml")
			if err != nil {
				return nil, &exitError{code: exitUsage, err: fmt.Errorf("source %q: secretRef %s: %w", name, p, err)}
			}
			auth = git.FromSecretData(data)
		}
	}
	snap, err := gitFetcher().Fetch(ctx, name, src, auth)
	if err != nil {
		return nil, failed(err)
	}
	return snap, nil
}

// gitFetcher is the process's one Fetcher, caching under the user cache
// directory (or in memory when there is none).
var gitFetcher = sync.OnceValue(func() *git.Fetcher {
	return git.New(git.Options{CacheDir: gitCacheDir()})
})

// gitCacheDir is where fetched repositories are kept: manifestsync/git
// under the user cache directory, or "" (memory) when there is none.
func gitCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "manifestsync", "git")
}

// readSecretData reads the data of a Secret manifest: data (base64) and
// stringData (plain) merged, as the API server merges them.
func readSecretData(dir, name string) (map[string][]byte, error) {
	snap, err := source.ObjectFileIn(dir, name)
	if err != nil {
		return nil, err
	}
	obj := snap.Object
	if obj["kind"] != "Secret" {
		return nil, fmt.Errorf("holds a %v, want a Secret", obj["kind"])
	}
	out := map[string][]byte{}
	if data, ok := obj["data"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("data.%s: %w", k, err)
			}
			out[k] = b
		}
	}
	if data, ok := obj["stringData"].(map[string]any); ok {
		for k, v := range data {
			s, _ := v.(string)
			out[k] = []byte(s)
		}
	}
	return out, nil
}
