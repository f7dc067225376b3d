package decrypt

import (
	"container/list"
	"sync"
)

// DefaultCacheBytes bounds the operator's Cache: the plaintext of the
// encrypted files of a few thousand ManifestSyncs (a Secret manifest is a
// few hundred bytes to a few KiB).
const DefaultCacheBytes = 32 << 20

// Cache keeps the plaintext of the files decrypted last, so that a resync
// of an unchanged source decrypts nothing (an age key agreement, a parse
// and an emit per file, each time). Entries are keyed by the file's
// content, format and the public keys of the key set that opened it
// (keysDigest): a caller whose keys differ never gets another's
// plaintext, and only what the keys opened is kept (never a failure).
// It holds at most maxBytes of plaintext and values, least recently used
// first out. Safe for concurrent use.
type Cache struct {
	mu       sync.Mutex
	maxBytes int
	size     int
	lru      *list.List // of *cached, most recently used first
	byKey    map[[32]byte]*list.Element
	hits     int
}

// entry is one file's decryption: its plaintext and values, or plainFile
// when it was not encrypted at all.
type entry struct {
	plain     []byte
	values    []string
	plainFile bool
}

type cached struct {
	key  [32]byte
	e    entry
	size int
}

// NewCache returns a Cache of at most maxBytes (DefaultCacheBytes when 0
// or less).
func NewCache(maxBytes int) *Cache {
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	return &Cache{maxBytes: maxBytes, lru: list.New(), byKey: map[[32]byte]*list.Element{}}
}

func (c *Cache) get(key [32]byte) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return entry{}, false
	}
	c.hits++
	c.lru.MoveToFront(el)
	return el.Value.(*cached).e, true
}

func (c *Cache) put(key [32]byte, e entry) {
	size := len(e.plain) + 64
	for _, v := range e.values {
		size += len(v) + 16
	}
	if size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	c.byKey[key] = c.lru.PushFront(&cached{key: key, e: e, size: size})
	c.size += size
	for c.size > c.maxBytes {
		el := c.lru.Back()
		old := el.Value.(*cached)
		c.lru.Remove(el)
		delete(c.byKey, old.key)
		c.size -= old.size
	}
}

// Stats returns the entries held, their size in bytes and the hits so far.
func (c *Cache) Stats() (entries, bytes, hits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.size, c.hits
}
