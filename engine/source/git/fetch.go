package git

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/lang/kustomize"
)

// Options configure a Fetcher. The zero value keeps the cache in memory,
// applies the defaults of source.Limits and of the fields below, gives
// each fetch a minute and waits for it.
type Options struct {
	// CacheDir holds one bare repository per remote URL; "" keeps them in
	// memory. One Fetcher at a time may use a directory.
	CacheDir string
	// Limits bound the files of a snapshot; MaxBytes is at most
	// MaxCacheBytes, as a snapshot is kept in the cache.
	Limits source.Limits
	// MaxFileBytes bounds one file, and any object the server sends: an
	// object's size is read from its header, and a larger one fails the
	// fetch before its content is read. Default 8 MiB.
	MaxFileBytes int64
	// MaxCacheBytes bounds what the cache holds in memory (repositories
	// kept in memory and snapshots), least recently used dropped first,
	// and what one fetch may bring. Default 128 MiB.
	MaxCacheBytes int64
	// Timeout bounds one fetch: connecting, the ref listing and the pack.
	Timeout time.Duration
	// Wait is how long Fetch waits for the server; 0 waits for the whole
	// fetch. When it passes first, the fetch goes on in the background
	// (one per source and credentials: a Fetch of the same source joins
	// it, and the next one gets its result), and Fetch returns the last
	// snapshot it returned for the same source and credentials, or else a
	// *PendingError, whose Done says when to ask again (the snapshot's
	// Pending says it too). So a server that does not answer holds no
	// caller longer than Wait.
	Wait time.Duration
}

const (
	defaultTimeout       = time.Minute
	defaultMaxFileBytes  = 8 << 20
	defaultMaxCacheBytes = 128 << 20
)

// Fetcher makes snapshots of Git sources, keeping a cache of repositories
// and snapshots between calls. It is safe for concurrent use.
type Fetcher struct {
	opts Options

	mu      sync.Mutex
	repos   map[string]*cachedRepo
	snaps   map[snapKey]*cachedSnap
	flights *source.Flights // the fetches, and the last snapshot served of each source
	clients map[[32]byte]*http.Client
	objects *cache.ObjectLRU // of the repositories under CacheDir
	// verdicts are the signatures checked (verify.go), nil for a good one.
	verdicts      map[verdictKey]error
	verifications int
}

// cachedRepo is the local copy of one remote.
type cachedRepo struct {
	// lock holds a token while a fetch uses the repository; a channel, so
	// that waiting for it can be cancelled.
	lock chan struct{}
	repo *git.Repository // opened on first use
	// bytes is the size of the objects it holds in memory, used when it
	// was last fetched into; both are guarded by Fetcher.mu.
	bytes int64
	used  time.Time
}

// snapKey names a snapshot: whole says that the path's kustomizations
// are built, so the repository's tree is read with it when one is there
// (engine.Snapshot.Root).
type snapKey struct {
	url, ref, path string
	whole          bool
}

type cachedSnap struct {
	commit plumbing.Hash
	files  map[string][]byte
	root   map[string][]byte // engine.Snapshot.Root; its contents are files'
	time   time.Time
	bytes  int64 // of files and root, counted once
}

// flightKey names a fetch: a source and the digest of its credentials, so
// that no caller joins, or is served the result of, a fetch made with
// credentials it does not hold.
type flightKey struct {
	snapKey
	auth   string
	verify string // the mode and the digest of the keys of a verify
}

// String is the key of the fetch in Fetcher.flights: the URL first, so
// that urlOf finds it.
func (k flightKey) String() string {
	return k.url + "\x00" + k.ref + "\x00" + k.path + "\x00" + strconv.FormatBool(k.whole) + "\x00" + k.auth + "\x00" + k.verify
}

// urlOf is the URL of the fetch whose key is key.
func urlOf(key string) string {
	url, _, _ := strings.Cut(key, "\x00")
	return url
}

// ErrPending is what a *PendingError is.
var ErrPending = source.ErrPending

// PendingError says that the server did not answer within Options.Wait;
// the fetch goes on, and Done is closed when it ends. It is the one of
// every provider that fetches in the background (source.PendingError).
type PendingError = source.PendingError

// New returns a Fetcher with an empty cache.
func New(opts Options) *Fetcher {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = defaultMaxFileBytes
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = defaultMaxCacheBytes
	}
	opts.Limits = withDefaults(opts.Limits)
	opts.Limits.MaxBytes = min(opts.Limits.MaxBytes, opts.MaxCacheBytes)
	return &Fetcher{
		opts:     opts,
		repos:    map[string]*cachedRepo{},
		snaps:    map[snapKey]*cachedSnap{},
		flights:  &source.Flights{Wait: opts.Wait, Timeout: opts.Timeout},
		clients:  map[[32]byte]*http.Client{},
		objects:  cache.NewObjectLRU(cache.FileSize(opts.MaxFileBytes)),
		verdicts: map[verdictKey]error{},
	}
}

// job is one Fetch, its inputs checked.
type job struct {
	name     string
	remote   *remote
	ref      v1alpha1.GitRef
	dir      string
	auth     transport.AuthMethod
	caBundle []byte
	verify   *verifyRequest
	key      flightKey
}

// Fetch returns the snapshot of the source called name. auth may be nil.
// The snapshot's file contents are shared with the cache and must not be
// modified.
func (f *Fetcher) Fetch(ctx context.Context, name string, src v1alpha1.GitSource, auth *Auth) (*engine.Snapshot, error) {
	return f.FetchVerified(ctx, name, src, auth, nil)
}

// FetchVerified is Fetch for a source with verify: keys are those of its
// verify.secretRef (ParseKeys), required when src.Verify is set. The
// commit (and, in the modes Tag and TagAndHEAD, the annotated tag) read is
// verified before its files are: a failure is a *source.VerifyError, and
// no snapshot of the commit is returned. A verdict is kept per commit or
// tag and keys, so an unchanged commit is verified once.
func (f *Fetcher) FetchVerified(ctx context.Context, name string, src v1alpha1.GitSource, auth *Auth, keys *Keys) (*engine.Snapshot, error) {
	snap, display, err := f.fetch(ctx, name, src, auth, keys)
	if err != nil {
		if ve, ok := errors.AsType[*source.VerifyError](err); ok {
			// It names the source, and holds no credential.
			return nil, ve
		}
		err = fmt.Errorf("source %q: git %s (%s): %w", name, display, source.DescribeRef(src.Ref), err)
		return nil, redact(err, append(auth.secrets(), urlPassword(src.URL)))
	}
	return snap, nil
}

func urlPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

func (f *Fetcher) fetch(ctx context.Context, name string, src v1alpha1.GitSource, auth *Auth, keys *Keys) (*engine.Snapshot, string, error) {
	r, err := parseRemote(src.URL)
	if err != nil {
		return nil, stripUserinfo(src.URL), err
	}
	dir, err := cleanPath(src.Path)
	if err != nil {
		return nil, r.display, err
	}
	method, err := r.authMethod(auth, f.opts.Timeout)
	if err != nil {
		return nil, r.display, err
	}
	verify, err := newVerifyRequest(src, keys)
	if err != nil {
		return nil, r.display, err
	}
	j := &job{name: name, remote: r, ref: src.Ref, dir: dir, auth: method, verify: verify}
	if auth != nil {
		j.caBundle = auth.CABundle
	}
	j.key = flightKey{
		snapKey: snapKey{url: r.key, ref: source.DescribeRef(src.Ref), path: dir, whole: dir != "" && (src.Kustomize == nil || *src.Kustomize)},
		auth:    auth.digest(r),
		verify:  verify.flightPart(),
	}
	snap, err := f.await(ctx, j)
	return snap, r.display, err
}

// await joins the fetch of j's source and credentials, or starts it, and
// waits for it as Options.Wait says (source.Flights: a caller that finds
// the fetch running is not held, so that the retries of a source whose
// server hangs hold no one).
func (f *Fetcher) await(ctx context.Context, j *job) (*engine.Snapshot, error) {
	return f.flights.Do(ctx, j.key.String(), func(ctx context.Context) (*engine.Snapshot, error) {
		snap, err := f.run(ctx, j)
		f.evict()
		return snap, err
	})
}

// run does j holding the lock of its repository. When ctx ends first it
// returns at once and leaves the work to finish in the background (go-git
// does not bound every network step by a context); the lock is released
// only then, so the repository is never used by two fetches at once.
func (f *Fetcher) run(ctx context.Context, j *job) (*engine.Snapshot, error) {
	cr := f.repo(j.remote.key)
	select {
	case cr.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	type result struct {
		snap *engine.Snapshot
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The lock is let go of before the result is delivered, so that a
		// caller that has its snapshot finds the repository free (Keep, the
		// eviction, the next fetch).
		done <- func() result {
			defer func() { <-cr.lock }()
			snap, err := f.sync(ctx, cr, j)
			if errors.Is(err, plumbing.ErrObjectNotFound) && ctx.Err() == nil {
				// A fetch cut short can leave objects without those they
				// refer to; start again from an empty cache.
				if err = f.discard(cr, j.remote.key); err == nil {
					snap, err = f.sync(ctx, cr, j)
				}
			}
			return result{snap, err}
		}()
	}()
	select {
	case res := <-done:
		if errors.Is(res.err, context.DeadlineExceeded) && deadlinePassed(ctx) {
			// A step's own deadline (response headers, the ssh
			// connection's) is as long as the fetch's and starts after
			// it: both end at once, and whichever the transport noticed
			// first would be told. The fetch's is the one that ended it,
			// and says after how long ("timed out after 1m0s").
			<-ctx.Done() // at once: its deadline passed
			return nil, context.Cause(ctx)
		}
		return res.snap, res.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// deadlinePassed reports whether ctx's deadline is past, even when the
// timer that ends ctx has not run yet.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func (f *Fetcher) repo(key string) *cachedRepo {
	f.mu.Lock()
	defer f.mu.Unlock()
	cr, ok := f.repos[key]
	if !ok {
		cr = &cachedRepo{lock: make(chan struct{}, 1)}
		f.repos[key] = cr
	}
	cr.used = time.Now()
	return cr
}

// sync lists the remote's refs, fetches what the cache lacks and makes
// the snapshot. It runs holding the repository's lock.
func (f *Fetcher) sync(ctx context.Context, cr *cachedRepo, j *job) (*engine.Snapshot, error) {
	if cr.repo == nil {
		repo, err := f.open(j.remote.key)
		if err != nil {
			return nil, err
		}
		cr.repo = repo
	}
	sess, err := f.openSession(ctx, j)
	if err != nil {
		return nil, classify(err)
	}
	defer sess.Close()
	l, err := sess.listing()
	if err != nil {
		return nil, err
	}
	t, err := resolve(j.ref, l)
	if err != nil {
		return nil, err
	}
	st := cr.repo.Storer
	var commit *object.Commit
	if t.pin != "" {
		commit, err = ensurePin(ctx, sess, st, l, t)
	} else {
		commit, err = ensureRef(ctx, sess, st, l, t)
	}
	if err != nil {
		return nil, err
	}
	// Before any file of the commit is read or served.
	err = f.verify(ctx, sess, st, l, t, commit, j)
	f.measure(cr)
	if err != nil {
		return nil, err
	}
	return f.snapshot(st, commit, t, j)
}

// open returns the cached repository for key, creating it if need be.
func (f *Fetcher) open(key string) (*git.Repository, error) {
	if f.opts.CacheDir == "" {
		return git.Init(memory.NewStorage(), nil)
	}
	dir := f.cacheDir(key)
	// The objects read last are kept in memory, in one cache of a file's
	// limit for every repository (an object is the same object in every
	// repository that holds it), not one each.
	st := filesystem.NewStorage(osfs.New(dir), f.objects)
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.Init(st, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	return repo, nil
}

// cacheDir is where the repository for key lives under Options.CacheDir.
func (f *Fetcher) cacheDir(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(f.opts.CacheDir, hex.EncodeToString(sum[:16]))
}

// discard drops the cached repository for key.
func (f *Fetcher) discard(cr *cachedRepo, key string) error {
	cr.repo = nil
	if f.opts.CacheDir == "" {
		return nil
	}
	if err := os.RemoveAll(f.cacheDir(key)); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// snapshot returns the snapshot of commit, reading its tree only when the
// cache holds no snapshot of it for the same URL, ref and path.
func (f *Fetcher) snapshot(st storage.Storer, commit *object.Commit, t target, j *job) (*engine.Snapshot, error) {
	key := j.key.snapKey
	f.mu.Lock()
	cached, ok := f.snaps[key]
	f.mu.Unlock()
	if !ok || cached.commit != commit.Hash {
		var err error
		if cached, err = f.read(st, commit, key); err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.snaps[key] = cached
		f.mu.Unlock()
	}
	return &engine.Snapshot{
		Revision: t.revision(cached.commit),
		Files:    maps.Clone(cached.files),
		Root:     cached.root, // read only: the build's, shared with the cache
		Time:     cached.time,
	}, nil
}

// read reads the files of commit at the path of key. When key is whole
// and they hold a kustomization, it reads the repository's tree too,
// within the same limits, for the build (engine.Snapshot.Root): Flux and
// Argo CD build a path of a whole checkout, so an overlay may name
// ../../base. The path's files are then the tree's, held once.
func (f *Fetcher) read(st storage.Storer, commit *object.Commit, key snapKey) (*cachedSnap, error) {
	files, size, err := readFiles(st, commit, key.path, f.opts.Limits, f.opts.MaxFileBytes)
	if err != nil {
		return nil, err
	}
	c := &cachedSnap{commit: commit.Hash, files: files, time: commit.Committer.When.UTC(), bytes: size}
	if !key.whole || !kustomize.Holds(files) {
		return c, nil
	}
	root, size, err := readFiles(st, commit, "", f.opts.Limits, f.opts.MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("the repository's tree, in which the kustomization of path %q is built: %w", key.path, err)
	}
	for p, b := range files {
		if shared, ok := root[key.path+"/"+p]; ok {
			files[p] = shared
		} else { // under a hidden directory, which the tree skips
			root[key.path+"/"+p] = b
			size += int64(len(b))
		}
	}
	if size > f.opts.Limits.MaxBytes || len(root) > f.opts.Limits.MaxFiles {
		return nil, fmt.Errorf("%w: the repository's tree, in which the kustomization of path %q is built, is over %d files or %d bytes (the limits)", ErrLimit, key.path, f.opts.Limits.MaxFiles, f.opts.Limits.MaxBytes)
	}
	c.root, c.bytes = root, size
	return c, nil
}
