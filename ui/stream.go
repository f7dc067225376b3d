package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// streamCount bounds the open streams, overall and per user.
type streamCount struct {
	mu     sync.Mutex
	total  int
	byUser map[string]int
}

// acquire counts a new stream of user, unless there are too many; perUser
// 0 is no limit per user.
func (c *streamCount) acquire(user string, perUser int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byUser == nil {
		c.byUser = map[string]int{}
	}
	if c.total >= maxStreams || (perUser > 0 && c.byUser[user] >= perUser) {
		return false
	}
	c.total++
	c.byUser[user]++
	return true
}

func (c *streamCount) release(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.byUser[user]--; c.byUser[user] <= 0 {
		delete(c.byUser, user)
	}
}

// stream sends the user a server-sent event for every change of a
// ManifestSync they may get, from the shared watch: nothing here reads
// the API server but the access reviews (cached). It ends with the
// request.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *caller) {
	rc := http.NewResponseController(w)
	// In ModeLocal every stream is the one user's: only the total counts.
	perUser := maxStreamsPerUser
	if s.opts.Mode == ModeLocal {
		perUser = 0
	}
	if !s.streams.acquire(c.id.key, perUser) {
		http.Error(w, "too many open streams", http.StatusTooManyRequests)
		return
	}
	defer s.streams.release(c.id.key)
	// What changed since the page was read: the cursor it carries
	// (?since=), or on a reconnection the id of the last event the browser
	// got (Last-Event-ID).
	since := r.Header.Get("Last-Event-ID")
	if since == "" {
		since = r.URL.Query().Get("since")
	}
	from, ok := parseCursor(since)
	sub, missed, lost := s.store.subscribe(from, ok)
	defer s.store.unsubscribe(sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The retry hint, and a first comment so that the client knows the
	// stream is open.
	if !write("retry: 2000\n: open\n\n") {
		return
	}
	send := func(ch change) bool {
		if !s.allowed(r.Context(), c.id, "get", ch.Namespace) {
			return true
		}
		data, err := json.Marshal(ch)
		if err != nil {
			return true
		}
		return write("id: %s\nevent: change\ndata: %s\n\n", cursor{epoch: s.store.epoch, seq: ch.seq}, data)
	}
	if lost && !write("event: change\ndata: {\"kind\":\"ManifestSync\"}\n\n") {
		return
	}
	for _, ch := range missed {
		if !send(ch) {
			return
		}
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			// The session may have ended (a log-out, an expired token):
			// the stream ends with it.
			if _, err := s.authenticate(r); err != nil {
				return
			}
			if !write(": keep-alive\n\n") {
				return
			}
		case ch := <-sub.ch:
			sub.mu.Lock()
			lost := sub.lost
			sub.lost = false
			sub.mu.Unlock()
			if lost {
				// Some changes were dropped: say that something changed,
				// without naming it.
				if !write("event: change\ndata: {\"kind\":\"ManifestSync\"}\n\n") {
					return
				}
			}
			if !send(ch) {
				return
			}
		}
	}
}
