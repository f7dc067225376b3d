package inspect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/operator/history"
)

// ChangesOptions bound Changes. The zero value is the defaults.
type ChangesOptions struct {
	// CacheDir holds the repositories fetched, one Fetcher per directory
	// for the process's life (see git.Options.CacheDir); "" is one
	// temporary directory of the process.
	CacheDir string
	// Timeout bounds the whole call; default 30 s.
	Timeout time.Duration
	// MaxFiles is how many changed paths one source lists; default 1000.
	MaxFiles int
	// Limits bound the snapshots fetched (files and bytes of the source
	// path at each commit): default source.Limits'.
	Limits source.Limits
	// MaxCacheBytes bounds what the Fetcher of CacheDir holds in memory
	// (git.Options.MaxCacheBytes), set by the first call with that
	// directory; default 64 MiB.
	MaxCacheBytes int64
}

const (
	defaultChangesTimeout = 30 * time.Second
	defaultMaxFiles       = 1000
	defaultMaxCacheBytes  = 64 << 20
)

// The changes of a path between two revisions.
const (
	ChangeAdded    = "Added"
	ChangeModified = "Modified"
	ChangeDeleted  = "Deleted"
)

// Changes lists, for each git source of ms, the files of its path that
// changed between the revisions status.history[from] and status.history[to]
// read (0 is the newest entry): each commit fetched with the git provider
// the operator uses, with the credentials of the source's secretRef read
// through c (the user's: one who may not read the Secret gets the API
// server's refusal in the note). Other sources, and git sources whose
// revision names no commit or that one entry lacks, get a note. An entry
// out of range is an error.
func Changes(ctx context.Context, c client.Reader, ms *v1alpha1.ManifestSync, from, to int, opts ChangesOptions) ([]SourceChange, error) {
	h := ms.Status.History
	for _, n := range []int{from, to} {
		if n < 0 || n >= len(h) {
			return nil, fmt.Errorf("ManifestSync %s/%s has no history entry %d: it has %d (0 is the newest)", ms.Namespace, ms.Name, n, len(h))
		}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultChangesTimeout
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = defaultMaxFiles
	}
	fetcher, err := changesFetcher(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	provider := git.Provider{Fetcher: fetcher, Credentials: GitCredentials(c, ms.Namespace)}
	revisions := func(n int) map[string]string {
		if h[n].Inputs == nil {
			return nil
		}
		return h[n].Inputs.Sources
	}
	fromRevs, toRevs := revisions(from), revisions(to)
	var out []SourceChange
	for _, src := range ms.Spec.Sources {
		sc := SourceChange{Source: src.Name, From: fromRevs[src.Name], To: toRevs[src.Name]}
		switch {
		case src.Git == nil:
			sc.Note = "not a git source"
		case sc.From == "" || sc.To == "":
			sc.Note = "not read by both entries"
		default:
			sc.Files, sc.Note = gitChanges(ctx, provider, src, sc.From, sc.To, opts.MaxFiles)
		}
		out = append(out, sc)
	}
	return out, nil
}

// gitChanges lists the files of src's path that differ between the
// commits of two revisions, at most maxFiles, sorted by path.
func gitChanges(ctx context.Context, p git.Provider, src v1alpha1.Source, fromRev, toRev string, maxFiles int) ([]FileChange, string) {
	a, okA := history.CommitOf(fromRev)
	b, okB := history.CommitOf(toRev)
	if !okA || !okB {
		return nil, "a revision names no commit (a local copy, or no git revision)"
	}
	if a == b {
		return nil, ""
	}
	fetch := func(commit string) (map[string][]byte, error) {
		g := *src.Git
		g.Ref = v1alpha1.GitRef{Commit: commit}
		// The commits of the history are compared for display, not
		// applied: the operator verified them when it read them, and a
		// pinned commit reads no tag for verify's modes Tag and TagAndHEAD.
		g.Verify = nil
		snap, err := p.FetchGit(ctx, src.Name, g)
		if err != nil {
			return nil, err
		}
		return snap.Files, nil
	}
	before, err := fetch(a)
	if err != nil {
		return nil, noteOf(ctx, err)
	}
	after, err := fetch(b)
	if err != nil {
		return nil, noteOf(ctx, err)
	}
	var files []FileChange
	for _, path := range slices.Sorted(maps.Keys(before)) {
		switch data, ok := after[path]; {
		case !ok:
			files = append(files, FileChange{Path: path, Change: ChangeDeleted})
		case !bytes.Equal(data, before[path]):
			files = append(files, FileChange{Path: path, Change: ChangeModified})
		}
	}
	for path := range after {
		if _, ok := before[path]; !ok {
			files = append(files, FileChange{Path: path, Change: ChangeAdded})
		}
	}
	slices.SortFunc(files, func(x, y FileChange) int { return strings.Compare(x.Path, y.Path) })
	if len(files) > maxFiles {
		return files[:maxFiles], fmt.Sprintf("%d files changed: the first %d listed", len(files), maxFiles)
	}
	return files, ""
}

// noteOf is the note of a failed fetch; its message names the source and
// never a credential (the git provider redacts them).
func noteOf(ctx context.Context, err error) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("not listed within the time limit: %v", err)
	}
	return err.Error()
}

// fetchers are the git Fetchers of Changes, one per cache directory: a
// directory is one Fetcher's at a time.
var fetchers = struct {
	sync.Mutex
	byDir   map[string]*git.Fetcher
	tempDir string
}{byDir: map[string]*git.Fetcher{}}

// changesFetcher is the Fetcher of opts' cache directory, made once.
func changesFetcher(opts ChangesOptions) (*git.Fetcher, error) {
	fetchers.Lock()
	defer fetchers.Unlock()
	dir := opts.CacheDir
	if dir == "" {
		if fetchers.tempDir == "" {
			d, err := os.MkdirTemp("", "manifestsync-ui-git-")
			if err != nil {
				return nil, fmt.Errorf("git cache: %w", err)
			}
			fetchers.tempDir = d
		}
		dir = fetchers.tempDir
	}
	if f := fetchers.byDir[dir]; f != nil {
		return f, nil
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = defaultMaxCacheBytes
	}
	f := git.New(git.Options{CacheDir: dir, Limits: opts.Limits, Timeout: opts.Timeout, MaxCacheBytes: opts.MaxCacheBytes})
	fetchers.byDir[dir] = f
	return f, nil
}

// GitCredentials gives git sources of a ManifestSync of namespace the
// credentials of their secretRef, read through c (the user's client: what
// the user may not read is refused with the API server's message). The
// error names the Secret, never its data.
func GitCredentials(c client.Reader, namespace string) git.Credentials {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*git.Auth, error) {
		data, err := secretData(ctx, c, namespace, ref)
		if err != nil {
			return nil, err
		}
		return git.FromSecretData(data), nil
	}
}

// HelmCredentials is GitCredentials for the chart repositories of helm
// sources.
func HelmCredentials(c client.Reader, namespace string) charts.Credentials {
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*charts.Auth, error) {
		data, err := secretData(ctx, c, namespace, ref)
		if err != nil {
			return nil, err
		}
		return charts.FromSecretData(data), nil
	}
}

// secretData reads the data of the Secret ref names in namespace.
func secretData(ctx context.Context, c client.Reader, namespace string, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
	var secret corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, &secret); err != nil {
		return nil, fmt.Errorf("secretRef %s/%s: %w", namespace, ref.Name, err)
	}
	return secret.Data, nil
}
