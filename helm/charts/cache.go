package charts

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// cache is the Fetcher's memory: chart archives by digest and repository
// indexes by URL and credentials, bounded together by bytes, least
// recently used dropped first. Under dir (the CLI's) archives and indexes
// are kept on disk too, bounded by the same size, oldest dropped first.
type cache struct {
	max int64
	dir string

	mu    sync.Mutex
	size  int64
	lru   *list.List // of *entry, most recent first
	items map[string]*list.Element
}

// entry is one cached item: a chart archive ("chart/sha256:HEX") or an
// index ("index/URL/DIGEST").
type entry struct {
	key   string
	bytes int64
	chart *cachedChart
	index *cachedIndex
}

// cachedChart is a chart archive and its files, checked.
type cachedChart struct {
	archive []byte
	files   map[string][]byte
}

// cachedIndex is what a repository's index.yaml said, kept by chart name:
// only what picking a version needs.
type cachedIndex struct {
	etag, lastModified string
	charts             map[string][]indexEntry
}

type indexEntry struct {
	version string
	urls    []string
	digest  string
}

func newCache(max int64, dir string) *cache {
	return &cache{max: max, dir: dir, lru: list.New(), items: map[string]*list.Element{}}
}

func (c *cache) get(key string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*entry)
}

// put keeps e, dropping the least recently used entries past the bound.
// An entry larger than the bound is not kept.
func (c *cache) put(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.key]; ok {
		c.size -= el.Value.(*entry).bytes
		c.lru.Remove(el)
		delete(c.items, e.key)
	}
	if e.bytes > c.max {
		return
	}
	c.items[e.key] = c.lru.PushFront(e)
	c.size += e.bytes
	for c.size > c.max {
		last := c.lru.Back()
		old := last.Value.(*entry)
		c.lru.Remove(last)
		delete(c.items, old.key)
		c.size -= old.bytes
	}
}

// stats returns the bytes and entries held in memory.
func (c *cache) stats() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size, len(c.items)
}

// chartKey is the cache key of the archive of digest ("sha256:HEX").
func chartKey(digest string) string { return "chart/" + digest }

// diskPath is where key lives under dir; "" without a dir.
func (c *cache) diskPath(key string) string {
	if c.dir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	kind, _, _ := strings.Cut(key, "/")
	return filepath.Join(c.dir, kind, hex.EncodeToString(sum[:16]))
}

// readDisk returns what key holds on disk, at most limit bytes.
func (c *cache) readDisk(key string, limit int64) []byte {
	p := c.diskPath(key)
	if p == "" {
		return nil
	}
	info, err := os.Stat(p)
	if err != nil || !info.Mode().IsRegular() || info.Size() > limit {
		return nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // recently used
	return b
}

// writeDisk keeps data for key on disk, then drops the oldest files past
// the bound. A failure to write only costs a later download.
func (c *cache) writeDisk(key string, data []byte) {
	p := c.diskPath(key)
	if p == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return
	}
	c.trimDisk()
}

// trimDisk drops the least recently used files under dir until they hold
// at most max bytes.
func (c *cache) trimDisk() {
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, kind := range []string{"chart", "index"} {
		ents, _ := os.ReadDir(filepath.Join(c.dir, kind))
		for _, e := range ents {
			info, err := e.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			files = append(files, file{filepath.Join(c.dir, kind, e.Name()), info.Size(), info.ModTime()})
			total += info.Size()
		}
	}
	if total <= c.max {
		return
	}
	slices.SortFunc(files, func(a, b file) int { return a.used.Compare(b.used) })
	for _, f := range files {
		if total <= c.max {
			return
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}
