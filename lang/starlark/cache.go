package starlark

import (
	"container/list"
	"sync"
	"sync/atomic"

	"go.starlark.net/starlark"
)

// programCacheSize bounds the compiled programs an Interpreter keeps, so that
// a long-running operator that sees many revisions does not grow forever.
const programCacheSize = 256

// programKey identifies a compiled program: its text and its file name (which
// the program's positions embed). The predeclared names are fixed per
// Interpreter, and so is the cache.
type programKey struct {
	sum      [32]byte // sha256 of the text
	filename string
}

// programCache is a mutex-guarded LRU of compiled programs. Programs are
// immutable and hold no values, so one may be executed by many threads at once.
type programCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *programEntry, most recently used first
	byKey map[programKey]*list.Element

	compiles atomic.Uint64 // programs compiled (cache misses), for tests and metrics
}

type programEntry struct {
	key   programKey
	prog  *starlark.Program
	sites Sites
}

func newProgramCache(max int) *programCache {
	return &programCache{max: max, order: list.New(), byKey: make(map[programKey]*list.Element)}
}

// get returns the cached program for key, if any, and marks it recently used.
func (c *programCache) get(key programKey) (*programEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*programEntry), true
}

// put stores a program, evicting the least recently used beyond the bound.
func (c *programCache) put(e *programEntry) {
	key := e.key
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok { // compiled concurrently by another Load
		c.order.MoveToFront(el)
		return
	}
	c.byKey[key] = c.order.PushFront(e)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*programEntry).key)
	}
}

// len returns the number of cached programs.
func (c *programCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
