package webhook

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// peers holds the limits of each source address: a token bucket
// (golang.org/x/time/rate) and the calls it has in flight. It remembers
// the addresses seen last, up to a bound: calls from many addresses
// cannot grow it without bound, and an address it has forgotten starts
// with a full bucket again (as a new one would).
type peers struct {
	limits SourceLimits
	mu     sync.Mutex // guards the peers' inFlight
	seen   *lru.Cache // source -> *peer
}

type peer struct {
	limiter  *rate.Limiter
	inFlight int
}

func newPeers(l SourceLimits) *peers {
	l.Rate = orDefault(l.Rate, 10)
	l.Burst = orDefault(l.Burst, 20)
	l.InFlight = orDefault(l.InFlight, 4)
	l.Tracked = orDefault(l.Tracked, 4096)
	return &peers{limits: l, seen: lru.New(l.Tracked)}
}

// admit counts a call from source; false when it is over the source's
// rate or calls at once. An admitted call is ended with done.
func (ps *peers) admit(source string) (*peer, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var p *peer
	if v, ok := ps.seen.Get(source); ok {
		p = v.(*peer)
	} else {
		p = &peer{limiter: rate.NewLimiter(rate.Limit(ps.limits.Rate), ps.limits.Burst)}
		ps.seen.Add(source, p)
	}
	if p.inFlight >= ps.limits.InFlight || !p.limiter.Allow() {
		return nil, false
	}
	p.inFlight++
	return p, true
}

// done ends a call admit admitted.
func (ps *peers) done(p *peer) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p.inFlight--
}

// len is how many sources are remembered.
func (ps *peers) len() int { return ps.seen.Len() }

// sourceOf is the source address of a request's RemoteAddr, an IPv6
// address as its /64 (one host is given a /64 to pick from). Behind a
// proxy it is the proxy's address: set limits there too.
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String()
	}
	prefix, _ := addr.Prefix(64)
	return prefix.String()
}
