package shard

import (
	"fmt"
	"net/http"
	"time"
)

// Guard wraps the transport of the replica's clients (rest.Config.Wrap) so
// that no write leaves the process once the fence has fallen, or before
// the first renewal, or past the fence's deadline even if its timer has
// not fired yet: a process paused (SIGSTOP) past its Lease resumes with
// every write it then sends refused, where the fence's context alone
// would race it. Reads pass. The Member's own client must not be guarded
// (it renews the Lease); clients of remote clusters are not, and rely on
// the fence's context.
func (m *Member) Guard(rt http.RoundTripper) http.RoundTripper {
	m.init()
	return guard{m: m, next: rt}
}

type guard struct {
	m    *Member
	next http.RoundTripper
}

func (g guard) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if !g.m.writable(time.Now()) {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrFenced)
		}
	}
	return g.next.RoundTrip(req)
}

// writable says whether the replica may write at now.
func (m *Member) writable(now time.Time) bool {
	select {
	case <-m.fenced:
		return false
	default:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.deadline.IsZero() && now.Before(m.deadline)
}
