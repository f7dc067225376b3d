// Package held keeps the last thing fetched of each source key, bounded
// in bytes, least recently used dropped first: what the oci and http
// providers need to answer an unchanged poll without downloading again.
// It is safe for concurrent use.
package held

import (
	"container/list"
	"sync"
)

// Cache holds values of type V by key, their sizes adding up to at most
// Max bytes.
type Cache[V any] struct {
	max     int64
	mu      sync.Mutex
	size    int64
	lru     *list.List // of *item[V], most recent first
	items   map[string]*list.Element
	dropped func(key string)
}

type item[V any] struct {
	key   string
	value V
	bytes int64
}

// New returns a cache of at most max bytes; dropped, when set, is told of
// every key let go because the bound was passed, its own value too large
// included (not of those Keep or Delete remove), so that a caller may let
// go of what it holds for it too. It is called without the cache's lock.
func New[V any](max int64, dropped func(key string)) *Cache[V] {
	return &Cache[V]{max: max, lru: list.New(), items: map[string]*list.Element{}, dropped: dropped}
}

// Get returns the value of key, marking it recently used.
func (c *Cache[V]) Get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*item[V]).value, true
}

// Put keeps value for key, of size bytes, dropping the least recently
// used past the bound. A value larger than the bound is not kept (and the
// key's previous value is let go).
func (c *Cache[V]) Put(key string, value V, bytes int64) {
	var dropped []string
	c.mu.Lock()
	c.remove(key)
	if bytes <= c.max {
		c.items[key] = c.lru.PushFront(&item[V]{key: key, value: value, bytes: bytes})
		c.size += bytes
	} else {
		dropped = append(dropped, key)
	}
	for c.size > c.max {
		old := c.lru.Back().Value.(*item[V])
		c.remove(old.key)
		dropped = append(dropped, old.key)
	}
	c.mu.Unlock()
	if c.dropped != nil {
		for _, k := range dropped {
			c.dropped(k)
		}
	}
}

// Delete lets go of key.
func (c *Cache[V]) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(key)
}

// Keep lets go of every key keep refuses.
func (c *Cache[V]) Keep(keep func(key string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.items {
		if !keep(k) {
			c.remove(k)
		}
	}
}

// Stats returns the bytes and the entries held.
func (c *Cache[V]) Stats() (bytes int64, entries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size, len(c.items)
}

func (c *Cache[V]) remove(key string) {
	if el, ok := c.items[key]; ok {
		c.size -= el.Value.(*item[V]).bytes
		c.lru.Remove(el)
		delete(c.items, key)
	}
}
