package controller

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
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

// writeLog is the recent writes of one desired state of an object.
type writeLog struct {
	digest string
	times  []time.Time // oldest first
}

// writeGuard stops write wars; the nil guard stops nothing.
type writeGuard struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	logs  map[writeKey]*writeLog
	swept time.Time
}

func newWriteGuard(limit int, window time.Duration) *writeGuard {
	return &writeGuard{limit: limit, window: window, now: time.Now, logs: map[writeKey]*writeLog{}}
}

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
	l := g.logs[k]
	if l == nil || l.digest != digest {
		return nil
	}
	g.expire(l, g.now())
	if len(l.times) < g.limit {
		return nil
	}
	return &writeWarError{id: k.id, writes: len(l.times), window: g.window, allowed: l.times[0].Add(g.window)}
}

// wrote records that digest was written to k's object, changing it.
func (g *writeGuard) wrote(k writeKey, digest string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	l := g.logs[k]
	if l == nil || l.digest != digest {
		l = &writeLog{digest: digest}
		g.logs[k] = l
	}
	g.expire(l, now)
	l.times = append(l.times, now)
	g.sweep(now)
}

// expire drops the writes older than the window.
func (g *writeGuard) expire(l *writeLog, now time.Time) {
	i := 0
	for i < len(l.times) && now.Sub(l.times[i]) >= g.window {
		i++
	}
	l.times = l.times[i:]
}

// sweep forgets, once per window, the objects not written within it, so
// that the guard holds only the writes of the last window.
func (g *writeGuard) sweep(now time.Time) {
	if now.Sub(g.swept) < g.window {
		return
	}
	g.swept = now
	for k, l := range g.logs {
		if g.expire(l, now); len(l.times) == 0 {
			delete(g.logs, k)
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
