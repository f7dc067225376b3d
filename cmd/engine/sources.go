package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/httpsrc"
	"github.com/manifestsync/manifestsync/oci"
)

// resolveSources takes the snapshot of every source the engine does not
// build itself, as source.Resolver with source.Local does: an override
// from --source (a directory, a file or a Git
// URL), else a local copy beside the sync file (NAME/ or NAME.yaml), else,
// for a git source, a fetch of what the spec names. An override of a source
// the sync file does not have is a usage error. A git source read from a
// local copy has the revision local:PATH@DIGEST (PATH as given to
// --source, or the copy's name beside the sync file), so that the inputs
// show that it is not the revision the spec pins (see localSources).
func resolveSources(ctx context.Context, sf *engine.SyncFile, overrides []string, keys sopsKeyFile) (map[string]*engine.Snapshot, error) {
	given, err := parseSourceFlags(overrides)
	if err != nil {
		return nil, err
	}
	for name, p := range given {
		if !slices.ContainsFunc(sf.Sync.Spec.Sources, func(s v1alpha1.Source) bool { return s.Name == name }) {
			return nil, usageErr("--source %s=%s: %s has no source named %q", name, p, sf.Name, name)
		}
	}
	return readSources(ctx, sf, given, keys)
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
func readSources(ctx context.Context, sf *engine.SyncFile, given map[string]string, keys sopsKeyFile) (map[string]*engine.Snapshot, error) {
	return readSourcesIn(ctx, source.WorkTree{}, sf, given, keys)
}

// readSourcesIn is readSources with the local copies beside the sync file
// read from t: the working tree, or a commit of its repository (diff
// --base). Overrides given with --source and the secrets of git sources
// are the user's, and always read from the working tree. The sources are
// resolved as the operator resolves them (source.Resolver), but for the
// cluster: an object or object set source needs a local copy. A failure
// is a *source.Error, inside an exitError of exitUsage when a local copy
// or file is wrong, of exitFailed otherwise. With spec.decryption, the
// SOPS files are decrypted with the identities of keys (a usage error
// when there is none).
func readSourcesIn(ctx context.Context, t source.Tree, sf *engine.SyncFile, given map[string]string, keys sopsKeyFile) (map[string]*engine.Snapshot, error) {
	dir := filepath.Dir(sf.Name)
	local, err := source.NewLocal(dir, t, given, sf.Sync.Spec.Sources)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	// An oci source without a Secret file beside the sync file reads the
	// registry with the user's docker config, as engine pull does.
	dockerConfig, err := (&ociFlags{}).dockerConfig()
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	res := source.Resolver{
		Namespace: sf.Sync.Namespace,
		Git:       git.Provider{Fetcher: gitFetcher(), Credentials: secretFiles(dir, git.FromSecretData), Keys: verifyKeys(dir, sf.Sync.Namespace)},
		Helm:      charts.Provider{Fetcher: helmFetcher(), Credentials: secretFiles(dir, charts.FromSecretData)},
		OCI:       ociCache().ProviderWith(secretData(dir), dockerConfig),
		HTTP:      httpCache().Provider(secretData(dir)),
		Objects: func(src *v1alpha1.Source) (source.ObjectReader, error) {
			return nil, fmt.Errorf("no local copy: give --source %s=FILE, or put it at %s.yaml", src.Name, filepath.Join(dir, src.Name))
		},
		Local: local,
	}
	if res.Decrypt, err = keys.decrypter(sf); err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	snaps, err := res.Resolve(ctx, sf.Sync.Spec.Sources)
	if err != nil {
		var le *source.LocalError
		if errors.As(err, &le) {
			return nil, &exitError{code: exitUsage, err: err}
		}
		return nil, failed(err)
	}
	return snaps, nil
}

// localSources lists, one line each, the git, oci, http and helm chart
// sources read from a local copy found beside the sync file, which
// replaces the revision the spec pins; a copy given with --source is the
// user's explicit choice and is not listed.
func localSources(sf *engine.SyncFile, snaps map[string]*engine.Snapshot, overrides []string) []string {
	given := map[string]bool{}
	for _, o := range overrides {
		name, _, _ := strings.Cut(o, "=")
		given[name] = true
	}
	var out []string
	for _, s := range sf.Sync.Spec.Sources {
		snap := snaps[s.Name]
		if s.Git == nil && s.OCI == nil && s.HTTP == nil && (s.Helm == nil || s.Helm.Chart == "") || given[s.Name] || snap == nil {
			continue
		}
		// A chart's revision is CHART@VERSION@local:PATH@DIGEST; the
		// digest of the source's refs may start either.
		rev := source.OwnRevision(snap.Revision)
		_, local, ok := strings.Cut(rev, source.LocalPrefix)
		if !ok || s.Helm == nil && !strings.HasPrefix(rev, source.LocalPrefix) {
			continue
		}
		name, _, _ := strings.Cut(local, "@")
		p := filepath.Join(filepath.Dir(sf.Name), name)
		switch {
		case s.Git != nil:
			out = append(out, fmt.Sprintf("source %q: read from the local copy %s, not fetched from %s at %s",
				s.Name, p, s.Git.URL, source.RefYAML(s.Git.Ref)))
		case s.OCI != nil:
			out = append(out, fmt.Sprintf("source %q: read from the local copy %s, not fetched from %s", s.Name, p, s.OCI.URL))
		case s.HTTP != nil:
			out = append(out, fmt.Sprintf("source %q: read from the local copy %s, not downloaded from %s", s.Name, p, redactURL(s.HTTP.URL)))
		default:
			out = append(out, fmt.Sprintf("source %q: read from the local copy %s, not fetched from %s (chart %s, version %q)",
				s.Name, p, s.Helm.Repository, s.Helm.Chart, s.Helm.Version))
		}
	}
	return out
}

// redactURL is raw without userinfo, query or fragment, as an http
// source's errors show a URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(an http source's URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// conventionalPath is the local copy of source name beside a sync file in
// dir, NAME/ or NAME.yaml; "" when there is none.
func conventionalPath(dir, name string) string {
	l, _ := source.NewLocal(dir, source.WorkTree{}, nil, nil)
	return l.Copy(name)
}

// secretFiles gives git and helm sources the credentials of their
// secretRef, made by from: the Secret manifest SECRET.yaml beside the sync
// file in dir, when it exists (none otherwise).
func secretFiles[A any](dir string, from func(map[string][]byte) *A) func(context.Context, v1alpha1.LocalObjectReference) (*A, error) {
	return func(_ context.Context, ref v1alpha1.LocalObjectReference) (*A, error) {
		p := filepath.Join(dir, ref.Name+".yaml")
		if _, err := os.Lstat(p); err != nil {
			return nil, nil
		}
		data, err := readSecretData(dir, ref.Name+".yaml")
		if err != nil {
			return nil, &source.LocalError{Err: fmt.Errorf("secretRef %s: %w", p, err)}
		}
		return from(data), nil
	}
}

// secretData gives oci and http sources the data of the Secrets they
// name: the Secret manifest SECRET.yaml beside the sync file in dir, when
// it exists (nil data, no credentials, otherwise).
func secretData(dir string) source.Secrets {
	return func(_ context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		p := filepath.Join(dir, ref.Name+".yaml")
		if _, err := os.Lstat(p); err != nil {
			return nil, nil
		}
		data, err := readSecretData(dir, ref.Name+".yaml")
		if err != nil {
			return nil, &source.LocalError{Err: fmt.Errorf("secretRef %s: %w", p, err)}
		}
		return data, nil
	}
}

// verifyKeys gives git sources with verify the public keys of their
// verify.secretRef: the Secret manifest SECRET.yaml beside the sync file
// in dir, which must exist (a source with verify is never read
// unverified). Messages name it as the operator does, and its file.
func verifyKeys(dir, namespace string) git.Keyring {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*git.Keys, error) {
		p := filepath.Join(dir, ref.Name+".yaml")
		if _, err := os.Lstat(p); err != nil {
			return nil, &source.LocalError{Err: fmt.Errorf("secretRef %s: the Secret of the keys commits are verified with is not there", p)}
		}
		data, err := secretData(dir)(ctx, ref)
		if err != nil {
			return nil, err
		}
		keys, err := git.ParseKeys("Secret "+namespace+"/"+ref.Name+" ("+p+")", data)
		if err != nil {
			return nil, &source.LocalError{Err: err}
		}
		return keys, nil
	}
}

// ociCache and httpCache are the process's oci and http caches: an
// artifact or archive read twice in one command is downloaded once.
var (
	ociCache = sync.OnceValue(func() *oci.Cache {
		c := oci.NewCache(oci.CacheOptions{})
		c.Verify = oci.CosignVerifier(c.Client) // verify: {provider: cosign}
		return c
	})
	httpCache = sync.OnceValue(func() *httpsrc.Cache { return httpsrc.NewCache(httpsrc.CacheOptions{}) })
)

// gitFetcher is the process's one Fetcher, caching under the user cache
// directory (or in memory when there is none).
var gitFetcher = sync.OnceValue(func() *git.Fetcher {
	return git.New(git.Options{CacheDir: gitCacheDir()})
})

// gitCacheDir is where fetched repositories are kept: manifestsync/git
// under the user cache directory, or "" (memory) when there is none.
func gitCacheDir() string { return userCacheDir("git") }

// helmFetcher is the process's one helm Fetcher, keeping chart archives
// and repository indexes under the user cache directory (bounded as the
// operator's cache is, 128 MiB), or in memory when there is none: a chart
// at one version is downloaded once, and an unchanged repository costs
// one request answered 304.
var helmFetcher = sync.OnceValue(func() *charts.Fetcher {
	return charts.New(charts.Options{CacheDir: userCacheDir("helm")})
})

// userCacheDir is manifestsync/name under the user cache directory, or ""
// when there is none.
func userCacheDir(name string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "manifestsync", name)
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
