package git

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// The cache is bounded in two ways: by bytes, as Options.MaxCacheBytes
// says (repositories kept in memory and snapshots, least recently fetched
// dropped first), and by use: Keep drops every repository no caller needs
// any more.

// digest identifies credentials without holding them: the flights and
// snapshots served of one source are told apart by it.
func (a *Auth) digest(r *remote) string {
	h := sha256.New()
	for _, s := range []string{r.user, r.password} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if a != nil {
		for _, b := range [][]byte{[]byte(a.Username), []byte(a.Password), []byte(a.BearerToken), a.SSHIdentity, a.SSHPassphrase, a.KnownHosts, a.CABundle} {
			h.Write(b)
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// measure records the size of what cr holds in memory. It runs holding
// cr's lock.
func (f *Fetcher) measure(cr *cachedRepo) {
	var size int64
	if st, ok := cr.repo.Storer.(*memory.Storage); ok {
		if iter, err := st.IterEncodedObjects(plumbing.AnyObject); err == nil {
			_ = iter.ForEach(func(o plumbing.EncodedObject) error {
				size += o.Size()
				return nil
			})
		}
	}
	f.mu.Lock()
	cr.bytes = size
	cr.used = time.Now()
	f.mu.Unlock()
}

// Holds reports whether the cache holds the repository at url (in memory
// or on disk), whatever its size.
func (f *Fetcher) Holds(url string) bool {
	r, err := parseRemote(url)
	if err != nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.repos[r.key]
	return ok
}

// CacheBytes returns the bytes the cache holds in memory and the number
// of repositories it holds.
func (f *Fetcher) CacheBytes() (bytes int64, repos int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sizeLocked(), len(f.repos)
}

func (f *Fetcher) sizeLocked() int64 {
	var n int64
	for _, cr := range f.repos {
		n += cr.bytes
	}
	for _, s := range f.snaps {
		n += s.bytes
	}
	return n
}

// evict drops the least recently used repositories, with their
// snapshots, until the cache is within Options.MaxCacheBytes. A
// repository a fetch is using is left alone.
func (f *Fetcher) evict() {
	f.mu.Lock()
	defer f.mu.Unlock()
	size := f.sizeLocked()
	if size <= f.opts.MaxCacheBytes {
		return
	}
	keys := make([]string, 0, len(f.repos))
	for k := range f.repos {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return f.repos[a].used.Compare(f.repos[b].used) })
	for _, k := range keys {
		if size <= f.opts.MaxCacheBytes {
			return
		}
		size -= f.dropLocked(k, false)
	}
}

// Keep drops from the cache every repository (in memory, and on disk
// under Options.CacheDir) whose URL is not one of urls, with its
// snapshots and the results of its fetches: what no caller uses is let
// go of. A repository a fetch is using is dropped by a later Keep.
func (f *Fetcher) Keep(urls []string) {
	keep := map[string]bool{}
	for _, u := range urls {
		if r, err := parseRemote(u); err == nil {
			keep[r.key] = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.repos {
		if !keep[k] {
			f.dropLocked(k, true)
		}
	}
	f.flights.Keep(func(k string) bool { return keep[urlOf(k)] })
	for k := range f.snaps {
		if !keep[k.url] {
			delete(f.snaps, k)
		}
	}
}

// dropLocked drops the repository key unless a fetch holds it, and
// returns the bytes let go of. It runs holding f.mu.
func (f *Fetcher) dropLocked(key string, disk bool) int64 {
	cr := f.repos[key]
	select {
	case cr.lock <- struct{}{}:
	default:
		return 0
	}
	defer func() { <-cr.lock }()
	freed := cr.bytes
	delete(f.repos, key)
	for k, s := range f.snaps {
		if k.url == key {
			freed += s.bytes
			delete(f.snaps, k)
		}
	}
	f.flights.Keep(func(k string) bool { return urlOf(k) != key })
	if disk && f.opts.CacheDir != "" {
		_ = os.RemoveAll(f.cacheDir(key))
	}
	return freed
}
