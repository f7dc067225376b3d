package charts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"
)

// pullHTTP fetches a chart from a Helm repository: its index (a
// conditional request), then, unless the cache holds it by the index's
// digest, the archive.
func (f *Fetcher) pullHTTP(ctx context.Context, r ref, auth *Auth) (*pulled, error) {
	base, err := url.Parse(r.repo)
	if err != nil {
		return nil, errors.New("repository: not a URL")
	}
	user, password, err := auth.basic(base.Host)
	if err != nil {
		return nil, err
	}
	if err := checkPlain(base.Scheme, base.Host, user, password); err != nil {
		return nil, err
	}
	client, err := f.clientFor(auth)
	if err != nil {
		return nil, err
	}
	idx, err := f.index(ctx, client, r, base.Host, user, password, auth)
	if err != nil {
		return nil, err
	}
	e, err := pick(idx.charts[r.chart], r)
	if err != nil {
		return nil, err
	}
	if len(e.urls) == 0 {
		return nil, fmt.Errorf("the index gives no URL of %s %s", r.chart, e.version)
	}
	u, err := resolveURL(r.repo, e.urls[0])
	if err != nil {
		return nil, fmt.Errorf("chart URL %q: %w", e.urls[0], err)
	}
	// Without a digest in the index, the one of the bytes downloaded for
	// this index (its validators) and URL stands in.
	learnedKey := strings.Join([]string{u, idx.etag, idx.lastModified}, "\x00")
	digest := f.learned.get(learnedKey)
	if e.digest != "" {
		digest = "sha256:" + strings.TrimPrefix(e.digest, "sha256:")
	}
	p := &pulled{chart: r.chart, version: e.version, digest: digest}
	if c := f.cached(digest); c != nil {
		p.archive, p.files = c.archive, c.copyFiles()
		return p, nil
	}
	c, got, err := f.download(ctx, client, u, base.Host, user, password, digest)
	if err != nil {
		return nil, err
	}
	if e.digest == "" && (idx.etag != "" || idx.lastModified != "") {
		f.learned.put(learnedKey, got)
	}
	p.digest, p.archive, p.files = got, c.archive, c.copyFiles()
	return p, nil
}

// pick returns the entry of the version r asks for, as Helm's
// IndexFile.Get picks it: a version given exactly, else the newest its
// range matches ("*", the newest stable, when none is given; prereleases
// only for a range that names one).
func pick(entries []indexEntry, r ref) (*indexEntry, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: chart %q is not in the repository's index", ErrNotFound, r.chart)
	}
	if r.version != "" {
		for i := range entries {
			if entries[i].version == r.version {
				return &entries[i], nil
			}
		}
	}
	constraint := r.version
	if constraint == "" {
		constraint = "*"
	}
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", r.version, err)
	}
	var best *indexEntry
	var bestV *semver.Version
	for i := range entries {
		v, err := semver.NewVersion(entries[i].version)
		if err != nil || !c.Check(v) {
			continue
		}
		if bestV == nil || v.GreaterThan(bestV) {
			best, bestV = &entries[i], v
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: no version of chart %q matches %q (of %d)", ErrNotFound, r.chart, r.version, len(entries))
	}
	return best, nil
}

// resolveURL resolves a chart's URL in the index against the repository's.
func resolveURL(repoURL, u string) (string, error) {
	ref, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	base, err := url.Parse(repoURL + "/")
	if err != nil {
		return "", err
	}
	return base.ResolveReference(ref).String(), nil
}

// indexKey is the cache key of a repository's index read with auth.
func indexKey(repoURL string, auth *Auth) string {
	return "index/" + strings.ToLower(repoURL) + "/" + auth.digest()
}

// index returns what the repository's index.yaml lists, asking with the
// validators of the copy cached: a 304 costs no body.
func (f *Fetcher) index(ctx context.Context, client *http.Client, r ref, host, user, password string, auth *Auth) (*cachedIndex, error) {
	key := indexKey(r.repo, auth)
	var cached *cachedIndex
	if e := f.cache.get(key); e != nil {
		cached = e.index
	} else if b := f.cache.readDisk(key, f.opts.MaxIndexBytes); b != nil {
		cached = decodeIndexCache(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.repo+"/index.yaml", nil)
	if err != nil {
		return nil, errors.New("repository: not a URL")
	}
	if user != "" || password != "" {
		req.SetBasicAuth(user, password)
	}
	if cached != nil {
		if cached.etag != "" {
			req.Header.Set("If-None-Match", cached.etag)
		}
		if cached.lastModified != "" {
			req.Header.Set("If-Modified-Since", cached.lastModified)
		}
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, classify(err)
	}
	defer res.Body.Close()
	switch {
	case res.StatusCode == http.StatusNotModified && cached != nil:
		f.cache.put(&entry{key: key, bytes: cached.size(), index: cached})
		return cached, nil
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("index.yaml: %w", statusError(res))
	}
	body, err := readBody(res.Body, f.opts.MaxIndexBytes, "index.yaml")
	if err != nil {
		return nil, err
	}
	idx, err := parseIndex(body)
	if err != nil {
		return nil, err
	}
	idx.etag, idx.lastModified = res.Header.Get("ETag"), res.Header.Get("Last-Modified")
	f.cache.put(&entry{key: key, bytes: idx.size(), index: idx})
	if idx.etag != "" || idx.lastModified != "" {
		f.cache.writeDisk(key, encodeIndexCache(idx))
	}
	return idx, nil
}

// indexYAML is the part of a repository's index.yaml a fetch reads (the
// fields of helm.sh/helm/v4/pkg/repo/v1.IndexFile; that package is not
// imported, as its getters drag Helm's plugin runtime and CLI in).
type indexYAML struct {
	APIVersion string `json:"apiVersion"`
	Entries    map[string][]*struct {
		Version string   `json:"version"`
		URLs    []string `json:"urls"`
		Digest  string   `json:"digest"`
	} `json:"entries"`
}

// parseIndex reads an index.yaml (or JSON) into the versions of each chart.
func parseIndex(body []byte) (*cachedIndex, error) {
	var file indexYAML
	if err := yaml.Unmarshal(body, &file); err != nil {
		return nil, fmt.Errorf("index.yaml: %w", err)
	}
	if file.APIVersion == "" {
		return nil, errors.New("index.yaml: no apiVersion: not a Helm repository index")
	}
	idx := &cachedIndex{charts: map[string][]indexEntry{}}
	for name, versions := range file.Entries {
		for _, v := range versions {
			if v == nil || v.Version == "" {
				continue
			}
			idx.charts[name] = append(idx.charts[name], indexEntry{version: v.Version, urls: v.URLs, digest: v.Digest})
		}
	}
	return idx, nil
}

// size is about what idx holds in memory.
func (idx *cachedIndex) size() int64 {
	n := int64(len(idx.etag) + len(idx.lastModified))
	for name, es := range idx.charts {
		n += int64(len(name))
		for _, e := range es {
			n += int64(len(e.version)+len(e.digest)) + 48
			for _, u := range e.urls {
				n += int64(len(u))
			}
		}
	}
	return n
}

// indexFile is a cached index on disk.
type indexFile struct {
	ETag         string                      `json:"etag,omitempty"`
	LastModified string                      `json:"lastModified,omitempty"`
	Charts       map[string][]indexFileEntry `json:"charts"`
}

type indexFileEntry struct {
	Version string   `json:"version"`
	URLs    []string `json:"urls,omitempty"`
	Digest  string   `json:"digest,omitempty"`
}

func encodeIndexCache(idx *cachedIndex) []byte {
	out := indexFile{ETag: idx.etag, LastModified: idx.lastModified, Charts: map[string][]indexFileEntry{}}
	for name, es := range idx.charts {
		for _, e := range es {
			out.Charts[name] = append(out.Charts[name], indexFileEntry{e.version, e.urls, e.digest})
		}
	}
	b, _ := json.Marshal(out)
	return b
}

func decodeIndexCache(b []byte) *cachedIndex {
	var in indexFile
	if json.Unmarshal(b, &in) != nil {
		return nil
	}
	idx := &cachedIndex{etag: in.ETag, lastModified: in.LastModified, charts: map[string][]indexEntry{}}
	for name, es := range in.Charts {
		for _, e := range es {
			idx.charts[name] = append(idx.charts[name], indexEntry{e.Version, e.URLs, e.Digest})
		}
	}
	return idx
}

// digests are the digests of archives an index gave none of, by URL and
// the index's validators, bounded in number.
type digests struct {
	mu sync.Mutex
	m  map[string]string
}

func (d *digests) get(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[key]
}

func (d *digests) put(key, digest string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= 4096 {
		d.m = map[string]string{}
	}
	d.m[key] = digest
}
