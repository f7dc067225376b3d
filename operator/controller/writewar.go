package controller

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A write war is an object that we keep rewriting to the same desired
// state because something keeps changing it back: another ManifestSync
// (both with policy Adopt or Overwrite on one object), two targets of one
// ManifestSync, or another controller reverting our fields. Every write
// triggers the other writer, so the war would run forever, as fast as the
// API server answers. The guard counts, per writer (a ManifestSync's
// target) and object, the writes that changed the object; one more write of
// the same desired state than WriteWarLimit within WriteWarWindow is
// refused and reported as a Conflict. The count is of one desired state:
// a changed desired object starts afresh, and writes older than the window
// no longer count, so the guard clears by itself.

// writeKey is one writer's view of one object.
type writeKey struct {
	writer  string // the owner label's value and the target's id
	cluster string // as inventoryItem.cluster
	id      v1alpha1.ObjectID
}

// writeLog is the recent writes of one desired state of an object: the
// first within the window here, the later ones (a write war's) in
// writeGuard.later. Times are Unix nanoseconds.
type writeLog struct {
	digest uint64 // of the desired state (its digest, hashed)
	first  int64
}

// writeGuard stops write wars; the nil guard stops nothing.
type writeGuard struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu sync.Mutex
	// logs are by writeKey, hashed: every object written within the
	// window has one (a first sync of 20,000 objects makes 20,000), and
	// a hash is a tenth of the key's strings. Two keys of one hash (a
	// chance of 2^-64 per pair) would only count each other's writes.
	// An object written once (all but those at war) costs a log and no
	// more: the later writes are in later.
	logs  map[uint64]writeLog
	later map[uint64][]int64 // oldest first
	seed  maphash.Seed
	swept time.Time
}

func newWriteGuard(limit int, window time.Duration) *writeGuard {
	return &writeGuard{limit: limit, window: window, now: time.Now, logs: map[uint64]writeLog{}, later: map[uint64][]int64{}, seed: maphash.MakeSeed()}
}

// hash is k's key in the logs.
func (g *writeGuard) hash(k writeKey) uint64 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	for _, s := range [...]string{k.writer, k.cluster, k.id.Group, k.id.Kind, k.id.Namespace, k.id.Name} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	return h.Sum64()
}

func (g *writeGuard) hashDigest(digest string) uint64 { return maphash.String(g.seed, digest) }

// writeWarError is a write refused by the guard.
type writeWarError struct {
	id     v1alpha1.ObjectID
	writes int
	window time.Duration
	// allowed is when the write will be allowed again: the oldest write
	// of the window leaves it then.
	allowed time.Time
}

func (e *writeWarError) Error() string {
	return fmt.Sprintf("%s: write war: rewritten to the same desired state %d times within %s and changed again by someone else; "+
		"not written until its desired state changes or %s passes", e.id.String(), e.writes, e.window, e.window)
}

// allow returns a writeWarError when writing digest to k's object would be
// a write war.
func (g *writeGuard) allow(k writeKey, digest string) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := g.hash(k)
	l, ok := g.logs[key]
	if !ok || l.digest != g.hashDigest(digest) {
		return nil
	}
	times := g.expire(append([]int64{l.first}, g.later[key]...), g.now())
	if len(times) < g.limit {
		return nil
	}
	return &writeWarError{id: k.id, writes: len(times), window: g.window, allowed: time.Unix(0, times[0]).Add(g.window)}
}

// wrote records that digest was written to k's object, changing it.
func (g *writeGuard) wrote(k writeKey, digest string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	key, d := g.hash(k), g.hashDigest(digest)
	l, ok := g.logs[key]
	var times []int64
	if ok && l.digest == d {
		times = g.expire(append([]int64{l.first}, g.later[key]...), now)
	}
	g.keep(key, d, append(times, now.UnixNano()))
	g.sweep(now)
}

// keep stores the writes of digest d to key's object, oldest first.
func (g *writeGuard) keep(key, d uint64, times []int64) {
	if len(times) == 0 {
		delete(g.logs, key)
		delete(g.later, key)
		return
	}
	g.logs[key] = writeLog{digest: d, first: times[0]}
	if len(times) == 1 {
		delete(g.later, key)
	} else {
		g.later[key] = times[1:]
	}
}

// expire drops the writes older than the window.
func (g *writeGuard) expire(times []int64, now time.Time) []int64 {
	i := 0
	for i < len(times) && now.Sub(time.Unix(0, times[i])) >= g.window {
		i++
	}
	return times[i:]
}

// sweep forgets, once per window, the objects not written within it, so
// that the guard holds only the writes of the last window.
func (g *writeGuard) sweep(now time.Time) {
	if now.Sub(g.swept) < g.window {
		return
	}
	g.swept = now
	for key, l := range g.logs {
		if later, ok := g.later[key]; ok {
			g.keep(key, l.digest, g.expire(append([]int64{l.first}, later...), now))
		} else if len(g.expire([]int64{l.first}, now)) == 0 {
			delete(g.logs, key)
		}
	}
}

// writeWarsOnly reports whether every problem of the outcomes is a write
// war and, if so, how long until the first refused write is allowed.
func writeWarsOnly(outcomes []*targetOutcome) (time.Duration, bool) {
	var first time.Time
	for _, o := range outcomes {
		if len(o.failures()) > 0 || o.empty != nil {
			return 0, false
		}
		for _, err := range o.conflicts() {
			var war *writeWarError
			if !errors.As(err, &war) {
				return 0, false
			}
			if first.IsZero() || war.allowed.Before(first) {
				first = war.allowed
			}
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(time.Until(first), time.Second), true
}
