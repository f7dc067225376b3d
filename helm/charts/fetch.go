package charts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
)

// Options configure a Fetcher. The zero value keeps the cache in memory,
// applies the defaults below, gives each fetch a minute and waits for it.
type Options struct {
	// CacheDir keeps chart archives and indexes on disk too (the CLI's);
	// "" keeps them in memory only.
	CacheDir string
	// MaxCacheBytes bounds the cache in memory, and on disk: archives,
	// their files and indexes, least recently used dropped first. Default
	// 128 MiB.
	MaxCacheBytes int64
	// Timeout bounds one fetch: connecting, the index, the chart and its
	// dependencies. Default one minute.
	Timeout time.Duration
	// Wait is how long a caller waits for the servers; 0 waits for the
	// whole fetch. See source.Flights.
	Wait time.Duration
	// MaxIndexBytes bounds a repository's index.yaml. Default 16 MiB.
	MaxIndexBytes int64
	// MaxChartBytes bounds a chart archive as downloaded. Default 16 MiB.
	MaxChartBytes int64
	// Limits bound a chart unpacked, with the archives of its charts/ and
	// its fetched dependencies. Default 10,000 files, 64 MiB.
	Limits source.Limits
	// MaxDepth bounds how deep archives nest under charts/. Default 5.
	MaxDepth int
	// MaxDependencies bounds the dependencies fetched for one chart.
	// Default 64.
	MaxDependencies int
}

const (
	defaultTimeout       = time.Minute
	defaultMaxCacheBytes = 128 << 20
	defaultMaxIndex      = 16 << 20
	defaultMaxChart      = 16 << 20
	defaultMaxFiles      = 10_000
	defaultMaxUnpacked   = 64 << 20
	defaultMaxDepth      = 5
	defaultMaxDeps       = 64
)

// Fetcher fetches charts, keeping a cache of indexes and archives between
// calls. It is safe for concurrent use.
type Fetcher struct {
	opts    Options
	client  *http.Client
	cache   *cache
	flights *source.Flights
	oci     *ociState
	learned digests // of archives the index gives no digest of

	mu      sync.Mutex
	clients map[[32]byte]*http.Client // by CA bundle

	// Counters, for tests and metrics: archives downloaded, and served
	// from the cache.
	downloads, hits atomic.Int64
}

// New returns a Fetcher with an empty cache (or the one on disk under
// opts.CacheDir).
func New(opts Options) *Fetcher {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.MaxCacheBytes <= 0 {
		opts.MaxCacheBytes = defaultMaxCacheBytes
	}
	if opts.MaxIndexBytes <= 0 {
		opts.MaxIndexBytes = defaultMaxIndex
	}
	if opts.MaxChartBytes <= 0 {
		opts.MaxChartBytes = defaultMaxChart
	}
	if opts.Limits.MaxFiles <= 0 {
		opts.Limits.MaxFiles = defaultMaxFiles
	}
	if opts.Limits.MaxBytes <= 0 {
		opts.Limits.MaxBytes = defaultMaxUnpacked
	}
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = defaultMaxDepth
	}
	if opts.MaxDependencies <= 0 {
		opts.MaxDependencies = defaultMaxDeps
	}
	return &Fetcher{
		opts:    opts,
		client:  newClient(opts.Timeout),
		cache:   newCache(opts.MaxCacheBytes, opts.CacheDir),
		flights: &source.Flights{Wait: opts.Wait, Timeout: opts.Timeout},
		oci:     newOCIState(),
	}
}

// Stats returns the chart archives downloaded and those served from the
// cache since the Fetcher was made, and the bytes and entries its cache
// holds in memory.
func (f *Fetcher) Stats() (downloads, hits, bytes int64, entries int) {
	bytes, entries = f.cache.stats()
	return f.downloads.Load(), f.hits.Load(), bytes, entries
}

// Keep lets go of the last snapshots served of every chart and chart
// directory that none of sources names: what no caller uses is not held
// past the cache's bound.
func (f *Fetcher) Keep(sources []v1alpha1.HelmSource) {
	keep := map[string]bool{}
	for _, src := range sources {
		if src.Source != "" {
			keep["deps\x00"+src.Source+"\x00"+src.Path] = true
		} else if r, err := refOf(src); err == nil {
			keep["chart\x00"+r.repo+"\x00"+r.chart] = true
		}
	}
	f.flights.Keep(func(key string) bool {
		parts := strings.SplitN(key, "\x00", 4)
		return len(parts) >= 3 && keep[strings.Join(parts[:3], "\x00")]
	})
}

// Provider is the helm provider of a source.Resolver: it fetches through
// one Fetcher with the credentials Credentials gives (none when nil).
type Provider struct {
	Fetcher     *Fetcher
	Credentials Credentials
}

// FetchHelm implements source.HelmFetcher.
func (p Provider) FetchHelm(ctx context.Context, name string, src v1alpha1.HelmSource, dir *engine.Snapshot) (*engine.Snapshot, error) {
	var auth *Auth
	if src.SecretRef != nil && p.Credentials != nil {
		var err error
		if auth, err = p.Credentials(ctx, *src.SecretRef); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
	}
	if dir != nil {
		return p.Fetcher.Dependencies(ctx, name, src, dir, auth)
	}
	return p.Fetcher.Fetch(ctx, name, src, auth)
}

// ref is a chart as a source names it.
type ref struct {
	repo     string // the repository URL, https://... or oci://..., no credentials
	chart    string
	version  string // a semver range or a version; "" is the newest stable
	insecure bool
}

func (r ref) oci() bool { return strings.HasPrefix(r.repo, "oci://") }

func (r ref) String() string {
	v := r.version
	if v == "" {
		v = "newest"
	}
	return fmt.Sprintf("chart %s (%s) from %s", r.chart, v, r.repo)
}

// refOf reads the chart of a source: a chart oci://HOST/PATH/CHART is split
// into its repository and name.
func refOf(src v1alpha1.HelmSource) (ref, error) {
	r := ref{repo: strings.TrimRight(src.Repository, "/"), chart: src.Chart, version: src.Version, insecure: src.Insecure}
	if rest, ok := strings.CutPrefix(src.Chart, "oci://"); ok {
		i := strings.LastIndex(rest, "/")
		if i < 0 || src.Repository != "" {
			return r, fmt.Errorf("chart %s: want oci://HOST/PATH/CHART without a repository", src.Chart)
		}
		r.repo, r.chart = "oci://"+rest[:i], rest[i+1:]
	}
	if r.chart == "" || strings.ContainsAny(r.chart, "/?#") {
		return r, fmt.Errorf("chart %q: want a chart name", r.chart)
	}
	u, err := url.Parse(r.repo)
	if err != nil {
		return r, errors.New("repository: not a URL")
	}
	if u.User != nil {
		return ref{chart: r.chart, version: r.version, repo: u.Scheme + "://" + u.Host}, errors.New("repository: credentials in the URL are refused; use secretRef")
	}
	switch u.Scheme {
	case "https", "oci":
	case "http":
		if !r.insecure {
			return r, errors.New("repository: plain http needs insecure: true")
		}
	default:
		return r, fmt.Errorf("repository: unsupported scheme %q: use https, or oci://", u.Scheme)
	}
	return r, nil
}

// Fetch returns the snapshot of a helm source of the chart form called
// name. auth may be nil. The snapshot's file contents are shared with the
// cache and must not be modified.
func (f *Fetcher) Fetch(ctx context.Context, name string, src v1alpha1.HelmSource, auth *Auth) (*engine.Snapshot, error) {
	r, err := refOf(src)
	if err != nil {
		return nil, redact.New(auth.secrets()...).Error(fmt.Errorf("source %q: helm %s: %w", name, r, err))
	}
	key := strings.Join([]string{"chart", r.repo, r.chart, r.version, fmt.Sprint(r.insecure), auth.digest()}, "\x00")
	snap, err := f.flights.Do(ctx, key, func(ctx context.Context) (*engine.Snapshot, error) {
		p, err := f.pull(ctx, r, auth)
		if err != nil {
			return nil, f.timedOut(ctx, err)
		}
		files, err := f.withDependencies(ctx, p.chart, p.files, r, auth)
		if err != nil {
			return nil, f.timedOut(ctx, err)
		}
		return &engine.Snapshot{Revision: p.chart + "@" + p.version + "@" + p.digest, Files: files}, nil
	})
	if err != nil {
		return nil, redact.New(auth.secrets()...).Error(fmt.Errorf("source %q: helm %s: %w", name, r, err))
	}
	return snap, nil
}

// pulled is a chart fetched: its name and version, the digest of its
// archive, the archive and its files.
type pulled struct {
	chart, version, digest string
	archive                []byte
	files                  map[string][]byte
}

// pull fetches the chart r names, from the cache when its digest is known.
func (f *Fetcher) pull(ctx context.Context, r ref, auth *Auth) (*pulled, error) {
	if r.oci() {
		return f.pullOCI(ctx, r, auth)
	}
	return f.pullHTTP(ctx, r, auth)
}

// cached returns the chart of digest from the cache, memory then disk.
func (f *Fetcher) cached(digest string) *cachedChart {
	if digest == "" {
		return nil
	}
	key := chartKey(digest)
	if e := f.cache.get(key); e != nil {
		f.hits.Add(1)
		return e.chart
	}
	b := f.cache.readDisk(key, f.opts.MaxChartBytes)
	if b == nil || sha256Digest(b) != digest {
		return nil
	}
	c, err := f.keep(b, false)
	if err != nil {
		return nil
	}
	f.hits.Add(1)
	return c
}

// keep checks a downloaded archive, and caches it by its digest.
func (f *Fetcher) keep(archive []byte, fresh bool) (*cachedChart, error) {
	files, err := unpack(archive, &budget{files: f.opts.Limits.MaxFiles, bytes: f.opts.Limits.MaxBytes, depth: f.opts.MaxDepth})
	if err != nil {
		return nil, err
	}
	if _, err := load(files); err != nil {
		return nil, err
	}
	c := &cachedChart{archive: archive, files: files}
	size := int64(len(archive))
	for _, b := range files {
		size += int64(len(b))
	}
	digest := sha256Digest(archive)
	f.cache.put(&entry{key: chartKey(digest), bytes: size, chart: c})
	if fresh {
		f.cache.writeDisk(chartKey(digest), archive)
	}
	return c, nil
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// download reads a chart archive from u, sending basic auth only when u is
// on host (the repository's), and checks it against digest when given.
func (f *Fetcher) download(ctx context.Context, client *http.Client, u, host, user, password, digest string) (*cachedChart, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", fmt.Errorf("chart URL: %w", err)
	}
	if (user != "" || password != "") && strings.EqualFold(req.URL.Host, host) {
		if err := checkPlain(req.URL.Scheme, req.URL.Host, user, password); err != nil {
			return nil, "", err
		}
		req.SetBasicAuth(user, password)
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, "", classify(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("chart archive: %w", statusError(res))
	}
	b, err := readBody(res.Body, f.opts.MaxChartBytes, "chart archive")
	if err != nil {
		return nil, "", err
	}
	got := sha256Digest(b)
	if digest != "" && got != digest {
		return nil, "", fmt.Errorf("chart archive: digest %s, the index says %s", got, digest)
	}
	f.downloads.Add(1)
	c, err := f.keep(b, true)
	return c, got, err
}

// files returns a copy of the map of c's files (the contents shared).
func (c *cachedChart) copyFiles() map[string][]byte { return maps.Clone(c.files) }

// timedOut is err, or, when the fetch's own deadline has passed and err is
// a timeout, that deadline: a step's deadline (the response headers') is as
// long as the fetch's and ends at the same moment, and whichever the
// transport noticed first would be told; the fetch's says after how long.
func (f *Fetcher) timedOut(ctx context.Context, err error) error {
	dl, ok := ctx.Deadline()
	if !errors.Is(err, ErrTimeout) || !ok || time.Now().Before(dl) {
		return err
	}
	return fmt.Errorf("%w after %s", ErrTimeout, f.flights.Timeout)
}
