package httpsrc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/held"
	"github.com/manifestsync/manifestsync/oci"
)

// Keys of the Secret an http source's secretRef names.
const (
	UsernameKey    = "username"
	PasswordKey    = "password"
	BearerTokenKey = "bearerToken"
	TokenKey       = "token" // another name of bearerToken, as git sources take it
	CAKey          = "ca.crt"
)

// CacheOptions configure a Cache.
type CacheOptions struct {
	// Limits bound each fetch (zero fields take DefaultLimits').
	Limits Limits
	// Wait is how long a caller waits for the server; 0 waits for the
	// whole fetch (the CLI). See source.Flights.
	Wait time.Duration
	// MaxBytes bounds the files of the last archives held (for unchanged
	// polls), least recently used let go first. Default 128 MiB.
	MaxBytes int64
}

// Cache is the http sources' provider state: the last archive read of
// each source (by URL, digest and the digest of its credentials) with its
// validators, bounded in bytes, so that an unchanged poll is one
// conditional GET answered 304 and downloads nothing; and the fetches in
// flight, so that a slow server holds no caller longer than Wait. It is
// safe for concurrent use.
type Cache struct {
	limits  Limits
	flights *source.Flights
	last    *held.Cache[*archive]

	// Counters, for tests and metrics: archives downloaded, and polls
	// answered 304.
	downloads, unchanged atomic.Int64
}

// archive is the last archive read of a key.
type archive struct {
	validators Validators
	files      map[string][]byte
}

// NewCache returns an empty Cache.
func NewCache(opts CacheOptions) *Cache {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 128 << 20
	}
	limits := opts.Limits.withDefaults()
	c := &Cache{limits: limits, flights: &source.Flights{Wait: opts.Wait, Timeout: limits.Timeout}}
	c.last = held.New[*archive](opts.MaxBytes, func(key string) {
		c.flights.Keep(func(k string) bool { return k != key })
	})
	return c
}

// Stats returns the archives downloaded, the polls answered 304, and the
// bytes and archives held.
func (c *Cache) Stats() (downloads, unchanged, bytes int64, entries int) {
	bytes, entries = c.last.Stats()
	return c.downloads.Load(), c.unchanged.Load(), bytes, entries
}

// Provider is the http provider of a source.Resolver reading the Secrets
// sources name through secrets (nil reads none: a source with a secretRef
// then fails).
func (c *Cache) Provider(secrets source.Secrets) source.HTTPFetcher {
	return provider{c: c, secrets: secrets}
}

type provider struct {
	c       *Cache
	secrets source.Secrets
}

// FetchHTTP implements source.HTTPFetcher.
func (p provider) FetchHTTP(ctx context.Context, name string, src v1alpha1.HTTPSource) (*engine.Snapshot, error) {
	snap, err := p.c.fetch(ctx, p.secrets, src)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", name, err)
	}
	return snap, nil
}

// sourceKey identifies what src reads, but for its credentials: the
// prefix of its keys, which Keep matches.
func sourceKey(src v1alpha1.HTTPSource) string {
	return strings.Join([]string{src.URL, src.Digest, fmt.Sprint(src.Insecure)}, "\x00")
}

func (c *Cache) fetch(ctx context.Context, secrets source.Secrets, src v1alpha1.HTTPSource) (*engine.Snapshot, error) {
	s := Source{URL: src.URL, Digest: src.Digest, Insecure: src.Insecure, Limits: c.limits}
	u, _, _, perr := parseURL(src.URL)
	what := "http source " + redact(u)
	if perr != nil {
		return nil, fmt.Errorf("%s: %w", what, perr)
	}
	dir, err := oci.CleanPath(src.Path, "archive")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var creds map[string][]byte
	if src.SecretRef != nil {
		if secrets == nil {
			return nil, fmt.Errorf("%s: secretRef %s: no Secrets can be read here", what, src.SecretRef.Name)
		}
		data, err := secrets(ctx, *src.SecretRef)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		// Nil data is the CLI's Secret file that is not there: no
		// credentials, as for git sources.
		creds = map[string][]byte{}
		for _, k := range []string{UsernameKey, PasswordKey, BearerTokenKey, TokenKey, CAKey} {
			if v, ok := data[k]; ok {
				creds[k] = v
			}
		}
		s.Username, s.Password = string(creds[UsernameKey]), string(creds[PasswordKey])
		s.BearerToken = string(creds[BearerTokenKey])
		if s.BearerToken == "" {
			s.BearerToken = string(creds[TokenKey])
		}
		s.CA = creds[CAKey]
	}
	key := sourceKey(src) + "\x00" + credsDigest(creds)
	snap, err := c.flights.Do(ctx, key, func(ctx context.Context) (*engine.Snapshot, error) {
		return c.read(ctx, key, s)
	})
	if _, ok := errors.AsType[*source.PendingError](err); ok {
		return nil, fmt.Errorf("%s: %w", what, err) // the fetch's own errors name it
	}
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return snap, nil
	}
	sub, err := snap.Sub(dir)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", what, snap.Revision, err)
	}
	// The whole archive is the build's tree, as a whole repository is a
	// git source's: an overlay at the path may name ../base.
	sub.Root = snap.Files
	sub.Pending = snap.Pending
	return sub, nil
}

// read fetches the archive of key under the fetch's own deadline, with
// the validators of the last one read.
func (c *Cache) read(ctx context.Context, key string, s Source) (*engine.Snapshot, error) {
	last, _ := c.last.Get(key)
	var v *Validators
	if last != nil {
		v = &last.validators
	}
	res, err := Fetch(ctx, s, v)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && errors.Is(cause, context.DeadlineExceeded) && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
		return nil, err
	}
	size := func(files map[string][]byte) int64 {
		var n int64
		for p, b := range files {
			n += int64(len(p) + len(b))
		}
		return n
	}
	if res.Unchanged && last != nil {
		c.unchanged.Add(1)
		// The server may have sent new validators with its 304.
		c.last.Put(key, &archive{validators: res.Validators, files: last.files}, size(last.files))
		return &engine.Snapshot{Revision: res.Revision, Files: last.files}, nil
	}
	c.downloads.Add(1)
	c.last.Put(key, &archive{validators: res.Validators, files: res.Files}, size(res.Files))
	return &engine.Snapshot{Revision: res.Revision, Files: res.Files}, nil
}

// Keep lets go of the last archives of every source that none of sources
// reads (whatever its credentials).
func (c *Cache) Keep(sources []v1alpha1.HTTPSource) {
	keep := map[string]bool{}
	for _, s := range sources {
		keep[sourceKey(s)] = true
	}
	kept := func(key string) bool {
		i := strings.LastIndex(key, "\x00")
		return i >= 0 && keep[key[:i]]
	}
	c.last.Keep(kept)
	c.flights.Keep(kept)
}

// credsDigest identifies credentials without holding them.
func credsDigest(m map[string][]byte) string {
	h := sha256.New()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(m[k]))
		h.Write(m[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
