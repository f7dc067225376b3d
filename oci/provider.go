package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/held"
)

// DockerConfigKey is the entry of a kubernetes.io/dockerconfigjson Secret
// that an oci source's secretRef reads.
const DockerConfigKey = ".dockerconfigjson"

// ErrVerifyUnavailable is the error of a source with verify read by a
// Cache without a Verifier: it is never read unverified.
var ErrVerifyUnavailable = errors.New("verification is not available")

// Verifier checks the signature of the artifact of src whose manifest
// digest (sha256:HEX) is digest, against keys, the data of the Secret
// src.Verify.SecretRef names; dockerConfigJSON is the source's
// credentials (nil when anonymous), for reading signatures stored in the
// same registry. A nil error means verified; a *source.VerifyError means
// refused (the operator's SourceVerifyFailed; its Source is filled in
// when empty); any other error is a failure to read the signatures (the
// source failed). It is called after the digest is resolved and before
// any layer of the artifact is downloaded or any file served, once per
// digest and key set (an unchanged poll is not verified again).
type Verifier func(ctx context.Context, src v1alpha1.OCISource, digest string, keys map[string][]byte, dockerConfigJSON []byte) error

// CacheOptions configure a Cache.
type CacheOptions struct {
	// Limits bound each read (zero fields take DefaultLimits').
	Limits Limits
	// Wait is how long a caller waits for the registry; 0 waits for the
	// whole fetch (the CLI). See source.Flights.
	Wait time.Duration
	// MaxBytes bounds the files of the last artifacts held (for unchanged
	// polls), least recently used let go first. Default 128 MiB.
	MaxBytes int64
}

// Cache is the oci sources' provider state: one Client, the last artifact
// read of each source (by URL, reference, layer selector and the digests
// of its credentials and verification keys), bounded in bytes, so that an
// unchanged poll is one manifest HEAD and no blob; and the fetches in
// flight, so that a slow registry holds no caller longer than Wait. It is
// safe for concurrent use.
type Cache struct {
	// Client reads the registries.
	Client *Client
	// Verify checks the signatures of sources with verify; nil fails
	// those sources with ErrVerifyUnavailable.
	Verify Verifier

	flights *source.Flights
	last    *held.Cache[*artifact]

	// Counters, for tests and metrics: artifacts downloaded, and polls
	// that found the digest unchanged.
	downloads, unchanged atomic.Int64
}

// artifact is the last artifact read of a key.
type artifact struct {
	digest, revision string
	files            map[string][]byte
}

// NewCache returns an empty Cache.
func NewCache(opts CacheOptions) *Cache {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 128 << 20
	}
	limits := opts.Limits.withDefaults()
	c := &Cache{
		Client:  New(limits),
		flights: &source.Flights{Wait: opts.Wait, Timeout: limits.Timeout},
	}
	c.last = held.New[*artifact](opts.MaxBytes, func(key string) {
		c.flights.Keep(func(k string) bool { return k != key })
	})
	return c
}

// Stats returns the artifacts downloaded, the polls that found their
// digest unchanged, and the bytes and artifacts held.
func (c *Cache) Stats() (downloads, unchanged, bytes int64, entries int) {
	bytes, entries = c.last.Stats()
	return c.downloads.Load(), c.unchanged.Load(), bytes, entries
}

// Provider is the oci provider of a source.Resolver reading the Secrets
// sources name through secrets (nil reads none: a source with a
// secretRef then fails).
func (c *Cache) Provider(secrets source.Secrets) source.OCIFetcher {
	return provider{c: c, secrets: secrets}
}

// ProviderWith is Provider with the credentials of a source without a
// secretRef, or whose Secret secrets has none of (nil data), taken from
// dockerConfig: the CLI's user's docker config.
func (c *Cache) ProviderWith(secrets source.Secrets, dockerConfig []byte) source.OCIFetcher {
	return provider{c: c, secrets: secrets, fallback: dockerConfig}
}

type provider struct {
	c        *Cache
	secrets  source.Secrets
	fallback []byte
}

// FetchOCI implements source.OCIFetcher.
func (p provider) FetchOCI(ctx context.Context, name string, src v1alpha1.OCISource) (*engine.Snapshot, error) {
	snap, err := p.c.fetch(ctx, p.secrets, p.fallback, name, src)
	if _, ok := errors.AsType[*source.VerifyError](err); ok {
		return nil, err // it names the source
	}
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", name, err)
	}
	return snap, nil
}

// sourceKey identifies what src reads, but for its credentials: the
// prefix of its keys, which Keep matches.
func sourceKey(src v1alpha1.OCISource) string {
	sel := ""
	if l := src.LayerSelector; l != nil {
		sel = l.MediaType + "\x01" + l.Operation
	}
	return strings.Join([]string{src.URL, src.Ref.Tag, src.Ref.SemVer, src.Ref.SemVerFilter, src.Ref.Digest, fmt.Sprint(src.Insecure), sel}, "\x00")
}

// digestOf identifies secret data without holding it.
func digestOf(data ...map[string][]byte) string {
	h := sha256.New()
	for _, m := range data {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(m[k]))
			h.Write(m[k])
		}
		h.Write([]byte{0xff})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (c *Cache) fetch(ctx context.Context, secrets source.Secrets, fallback []byte, name string, src v1alpha1.OCISource) (*engine.Snapshot, error) {
	what := fmt.Sprintf("oci %q", src.URL)
	dir, err := cleanPath(src.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var dockerConfig []byte
	var creds map[string][]byte
	if src.SecretRef != nil {
		if creds, err = readSecret(ctx, secrets, *src.SecretRef); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		// No data at all is the CLI's Secret file that is not there:
		// anonymous reads, as for git sources.
		if creds != nil {
			if dockerConfig = creds[DockerConfigKey]; dockerConfig == nil {
				return nil, fmt.Errorf("%s: secretRef %s: no %s entry (a kubernetes.io/dockerconfigjson Secret)", what, src.SecretRef.Name, DockerConfigKey)
			}
			creds = map[string][]byte{DockerConfigKey: dockerConfig}
		}
	}
	if creds == nil && fallback != nil {
		dockerConfig = fallback
		creds = map[string][]byte{DockerConfigKey: dockerConfig}
	}
	var keys map[string][]byte
	if v := src.Verify; v != nil {
		if c.Verify == nil {
			return nil, fmt.Errorf("%s: verify (%s): %w in this build", what, v.Provider, ErrVerifyUnavailable)
		}
		if keys, err = readSecret(ctx, secrets, v.SecretRef); err != nil {
			return nil, fmt.Errorf("%s: verify: %w", what, err)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("%s: verify: secretRef %s: no keys", what, v.SecretRef.Name)
		}
	}
	key := sourceKey(src) + "\x00" + digestOf(creds) + "\x00" + verifyKey(src.Verify, keys)
	snap, err := c.flights.Do(ctx, key, func(ctx context.Context) (*engine.Snapshot, error) {
		return c.read(ctx, key, name, src, dockerConfig, keys)
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
	// The whole artifact is the build's tree, as a whole repository is a
	// git source's: an overlay at the path may name ../base.
	sub.Root = snap.Files
	sub.Pending = snap.Pending
	return sub, nil
}

// verifyKey is the part of a key that says which keys verified it.
func verifyKey(v *v1alpha1.OCIVerification, keys map[string][]byte) string {
	if v == nil {
		return "-"
	}
	return v.Provider + "/" + v.SecretRef.Name + "/" + digestOf(keys)
}

// read reads the artifact of key under the fetch's own deadline: one
// manifest HEAD when the digest is the one read last, else the manifest
// and its layer, verified before they are kept or served.
func (c *Cache) read(ctx context.Context, key, name string, src v1alpha1.OCISource, dockerConfig []byte, keys map[string][]byte) (*engine.Snapshot, error) {
	last, _ := c.last.Get(key)
	lastDigest := ""
	if last != nil {
		lastDigest = last.digest
	}
	osrc := sourceOf(src, dockerConfig)
	var resolved *Resolved
	if src.Verify != nil {
		// A source with verify resolves first, so that no layer of an
		// artifact is downloaded before its digest is verified.
		r, err := c.Client.Resolve(ctx, osrc)
		if err != nil {
			return nil, timedOut(ctx, err)
		}
		if r.Digest == lastDigest {
			c.unchanged.Add(1)
			return &engine.Snapshot{Revision: r.Revision, Files: last.files}, nil
		}
		// Verification: the digest is resolved, nothing of the artifact
		// is read, served or kept yet.
		if err := c.Verify(ctx, src, r.Digest, keys, dockerConfig); err != nil {
			if ve, ok := errors.AsType[*source.VerifyError](err); ok && ve.Source == "" {
				ve.Source = name
			}
			return nil, timedOut(ctx, err)
		}
		resolved = &r
		osrc.Ref = Ref{Digest: r.Digest} // the verified digest, whatever the tag says now
	}
	a, err := c.Client.Fetch(ctx, osrc, lastDigest)
	if err != nil {
		return nil, timedOut(ctx, err)
	}
	if resolved != nil {
		a.Resolved = *resolved
	}
	if a.Unchanged && last != nil {
		c.unchanged.Add(1)
		return &engine.Snapshot{Revision: a.Revision, Files: last.files}, nil
	}
	c.downloads.Add(1)
	var size int64
	for p, b := range a.Files {
		size += int64(len(p) + len(b))
	}
	c.last.Put(key, &artifact{digest: a.Digest, revision: a.Revision, files: a.Files}, size)
	return &engine.Snapshot{Revision: a.Revision, Files: a.Files}, nil
}

// sourceOf is the Source of Client.Fetch for src.
func sourceOf(src v1alpha1.OCISource, dockerConfig []byte) Source {
	s := Source{
		URL:              src.URL,
		Ref:              Ref{Tag: src.Ref.Tag, SemVer: src.Ref.SemVer, SemVerFilter: src.Ref.SemVerFilter, Digest: src.Ref.Digest},
		Insecure:         src.Insecure,
		DockerConfigJSON: dockerConfig,
	}
	if l := src.LayerSelector; l != nil {
		s.LayerSelector = &LayerSelector{MediaType: l.MediaType, Operation: l.Operation}
	}
	return s
}

// timedOut says so when the fetch's own deadline ended it.
func timedOut(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) && errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%v)", err, cause)
	}
	return err
}

// Keep lets go of the last artifacts of every source that none of
// sources reads (whatever its credentials): what no ManifestSync names is
// not held past the next sweep.
func (c *Cache) Keep(sources []v1alpha1.OCISource) {
	keep := map[string]bool{}
	for _, s := range sources {
		keep[sourceKey(s)] = true
	}
	kept := func(key string) bool {
		i := strings.LastIndex(key, "\x00")
		if i < 0 {
			return false
		}
		j := strings.LastIndex(key[:i], "\x00")
		return j >= 0 && keep[key[:j]]
	}
	c.last.Keep(kept)
	c.flights.Keep(kept)
}

// readSecret reads the Secret ref names through secrets; nil data, no
// error, is a Secret the reader has none of (the CLI's file beside the
// sync file that is not there).
func readSecret(ctx context.Context, secrets source.Secrets, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
	if secrets == nil {
		return nil, fmt.Errorf("secretRef %s: no Secrets can be read here", ref.Name)
	}
	return secrets(ctx, ref)
}

// cleanPath is a source's path inside its artifact: "" for the whole of
// it; one that is absolute or leaves it is refused.
func cleanPath(p string) (string, error) {
	return CleanPath(p, "artifact")
}

// CleanPath is the subtree p of a source's files, what naming them (the
// artifact, the archive): "" for all of them; a path that is absolute or
// leaves them is refused.
func CleanPath(p, what string) (string, error) {
	if p == "" {
		return "", nil
	}
	if path.IsAbs(p) || strings.HasPrefix(p, "\\") {
		return "", fmt.Errorf("path %q must be relative to the %s's root", p, what)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q leaves the %s", p, what)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}
