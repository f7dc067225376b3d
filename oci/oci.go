package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of Flux's artifacts (fluxcd/pkg/oci).
const (
	FluxConfigMediaType  = "application/vnd.cncf.flux.config.v1+json"
	FluxContentMediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
)

// Layer operations of a LayerSelector, as Flux's OCIRepository names them.
const (
	OperationExtract = "extract"
	OperationCopy    = "copy"
)

// Errors a caller may tell apart with errors.Is.
var (
	ErrUnauthorized = errors.New("unauthorized")
	ErrNotFound     = errors.New("not found")
	ErrLimit        = errors.New("limit exceeded")
	ErrRefused      = errors.New("refused")
)

// validTag is the grammar of a tag in the OCI distribution spec.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Ref says which artifact of a repository to read: Digest if set, else the
// highest version SemVer matches among the tags (those SemVerFilter, a
// regular expression, matches), else Tag ("latest" when all are empty).
type Ref struct {
	Tag          string
	SemVer       string
	SemVerFilter string
	Digest       string
}

// LayerSelector picks the layer to read and what to do with it, as in
// Flux's OCIRepository: the first layer of MediaType (any first layer when
// empty), extracted (a tar+gzip unpacked) or copied (its bytes, as one
// file named by its org.opencontainers.image.title annotation, else
// layer.tgz).
type LayerSelector struct {
	MediaType string
	Operation string
}

// Source is an artifact to read.
type Source struct {
	// URL is oci://HOST/REPO.
	URL string
	Ref Ref
	// Insecure reads over plain http.
	Insecure bool
	// LayerSelector is nil for the first layer, extracted.
	LayerSelector *LayerSelector
	// DockerConfigJSON is a .dockerconfigjson's content, or nil for
	// anonymous reads.
	DockerConfigJSON []byte
}

// Limits bound what a registry can make a read cost.
type Limits struct {
	// MaxLayerBytes bounds a layer as stored (compressed).
	MaxLayerBytes int64
	// MaxManifestBytes bounds a manifest and a tag listing.
	MaxManifestBytes int64
	// MaxFiles and MaxUnpackedBytes bound an extracted layer.
	MaxFiles         int
	MaxUnpackedBytes int64
	// Timeout bounds each call (Resolve, Fetch, Push) as a whole.
	Timeout time.Duration
}

// DefaultLimits are the limits of a zero Limits field: 64 MiB per layer,
// 4 MiB per manifest, 10000 files and 256 MiB unpacked, 2 minutes a call.
func DefaultLimits() Limits {
	return Limits{MaxLayerBytes: 64 << 20, MaxManifestBytes: 4 << 20, MaxFiles: 10000, MaxUnpackedBytes: 256 << 20, Timeout: 2 * time.Minute}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxLayerBytes <= 0 {
		l.MaxLayerBytes = d.MaxLayerBytes
	}
	if l.MaxManifestBytes <= 0 {
		l.MaxManifestBytes = d.MaxManifestBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxUnpackedBytes <= 0 {
		l.MaxUnpackedBytes = d.MaxUnpackedBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	return l
}

// Resolved is what a reference names now.
type Resolved struct {
	// Tag is the tag read, empty for a digest reference.
	Tag string
	// Digest is the manifest's, sha256:HEX.
	Digest string
	// Revision is TAG@sha256:HEX, or sha256:HEX for a digest reference.
	Revision string
}

// Artifact is what Fetch read.
type Artifact struct {
	Resolved
	// Unchanged is set when Digest is the one the caller gave: nothing
	// but the reference was read, and Files is nil.
	Unchanged bool
	// Files maps clean, slash-separated relative paths to contents.
	Files map[string][]byte
	// Annotations are the manifest's (source, revision, created...).
	Annotations map[string]string
}

// Client reads artifacts. It keeps a puller per registry and credentials,
// so that a poll does not ask for the registry's ping and token again. It
// is safe for concurrent use.
type Client struct {
	limits Limits
	base   http.RoundTripper
	mu     sync.Mutex
	pull   map[string]*remote.Puller
}

// New returns a Client with limits (zero fields take DefaultLimits').
func New(limits Limits) *Client {
	return &Client{limits: limits.withDefaults(), base: newTransport(), pull: map[string]*remote.Puller{}}
}

// newTransport is an http transport with deadlines for each step of a
// request; the body has the call's.
func newTransport() http.RoundTripper {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
	}
}

// repository parses oci://HOST/REPO, refusing credentials over plain http
// to a host other than loopback.
func repository(url string, insecure bool, dockerConfig []byte) (name.Repository, *credentials, error) {
	rest, ok := strings.CutPrefix(url, "oci://")
	if !ok {
		return name.Repository{}, nil, fmt.Errorf("%w: not an oci:// URL", ErrRefused)
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(rest, append(opts, name.StrictValidation)...)
	if err != nil {
		return name.Repository{}, nil, fmt.Errorf("repository: %w", err)
	}
	creds, err := credentialsFor(dockerConfig, repo.RegistryStr())
	if err != nil {
		return name.Repository{}, nil, err
	}
	if insecure && creds.set() && !isLoopback(repo.RegistryStr()) {
		return name.Repository{}, nil, fmt.Errorf("%w: credentials over plain http to %s, not a loopback host: use https", ErrRefused, repo.RegistryStr())
	}
	return repo, creds, nil
}

// puller returns the puller of the registry and credentials, made on
// first use.
func (c *Client) puller(repo name.Repository, insecure bool, creds *credentials) (*remote.Puller, string, error) {
	key := repo.RegistryStr() + "\x00" + fmt.Sprint(insecure) + "\x00" + creds.digest()
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pull[key]; ok {
		return p, key, nil
	}
	p, err := remote.NewPuller(remoteOptions(c.base, c.limits, creds)...)
	if err != nil {
		return nil, "", err
	}
	if len(c.pull) >= 64 { // credentials come from Secrets: keep a bounded few
		clear(c.pull)
	}
	c.pull[key] = p
	return p, key, nil
}

// drop forgets a puller after a failure: a puller keeps the outcome of its
// first ping and token.
func (c *Client) drop(key string) {
	c.mu.Lock()
	delete(c.pull, key)
	c.mu.Unlock()
}

func remoteOptions(base http.RoundTripper, l Limits, creds *credentials) []remote.Option {
	return []remote.Option{
		remote.WithAuth(creds.authenticator()),
		remote.WithTransport(capTransport{base, max(l.MaxLayerBytes, l.MaxManifestBytes)}),
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithUserAgent("manifestsync"),
	}
}

// Resolve returns what src's reference names now: a tag listing for a
// range, a manifest HEAD for a tag, nothing for a digest.
func (c *Client) Resolve(ctx context.Context, src Source) (Resolved, error) {
	ctx, cancel := context.WithTimeout(ctx, c.limits.Timeout)
	defer cancel()
	repo, creds, err := repository(src.URL, src.Insecure, src.DockerConfigJSON)
	if err != nil {
		return Resolved{}, sourceError(src.URL, err)
	}
	p, key, err := c.puller(repo, src.Insecure, creds)
	if err != nil {
		return Resolved{}, sourceError(src.URL, err)
	}
	r, err := c.resolve(ctx, p, repo, src.Ref)
	if err != nil {
		c.drop(key)
		return Resolved{}, sourceError(src.URL, err)
	}
	return r, nil
}

func (c *Client) resolve(ctx context.Context, p *remote.Puller, repo name.Repository, ref Ref) (Resolved, error) {
	if ref.Digest != "" {
		h, err := v1.NewHash(ref.Digest)
		if err != nil || h.Algorithm != "sha256" {
			return Resolved{}, fmt.Errorf("%w: digest %q is not sha256:HEX", ErrRefused, ref.Digest)
		}
		return Resolved{Digest: h.String(), Revision: h.String()}, nil
	}
	tag := ref.Tag
	if ref.SemVer != "" {
		t, err := c.pickTag(ctx, p, repo, ref)
		if err != nil {
			return Resolved{}, err
		}
		tag = t
	}
	if tag == "" {
		tag = "latest"
	}
	if !validTag.MatchString(tag) {
		return Resolved{}, fmt.Errorf("%w: tag %q is not a valid tag", ErrRefused, tag)
	}
	d, err := p.Head(ctx, repo.Tag(tag))
	if err != nil {
		return Resolved{}, fmt.Errorf("tag %q: %w", tag, RegistryError(err))
	}
	return Resolved{Tag: tag, Digest: d.Digest.String(), Revision: tag + "@" + d.Digest.String()}, nil
}

// pickTag returns the tag of the highest version ref.SemVer matches among
// those ref.SemVerFilter matches.
func (c *Client) pickTag(ctx context.Context, p *remote.Puller, repo name.Repository, ref Ref) (string, error) {
	constraint, err := semver.NewConstraint(ref.SemVer)
	if err != nil {
		return "", fmt.Errorf("%w: semver range %q: %w", ErrRefused, ref.SemVer, err)
	}
	var filter *regexp.Regexp
	if ref.SemVerFilter != "" {
		if filter, err = regexp.Compile(ref.SemVerFilter); err != nil {
			return "", fmt.Errorf("%w: semverFilter %q: %w", ErrRefused, ref.SemVerFilter, err)
		}
	}
	tags, err := listTags(ctx, p, repo)
	if err != nil {
		return "", err
	}
	var best *semver.Version
	bestTag := ""
	for _, tag := range tags {
		if filter != nil && !filter.MatchString(tag) {
			continue
		}
		v, err := semver.NewVersion(tag)
		if err != nil || !constraint.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) || (v.Equal(best) && tag < bestTag) {
			best, bestTag = v, tag
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: no tag matches semver range %q", ErrNotFound, ref.SemVer)
	}
	return bestTag, nil
}

// maxTags bounds a tag listing (every page of it): a registry that pages
// on and on gets an error, not a loop until the deadline.
const maxTags = 100000

// listTags lists the tags of repo, page by page, up to maxTags.
func listTags(ctx context.Context, p *remote.Puller, repo name.Repository) ([]string, error) {
	l, err := p.Lister(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("tag listing: %w", RegistryError(err))
	}
	var tags []string
	for l.HasNext() {
		page, err := l.Next(ctx)
		if err != nil {
			return nil, fmt.Errorf("tag listing: %w", RegistryError(err))
		}
		tags = append(tags, page.Tags...)
		if len(tags) > maxTags {
			return nil, fmt.Errorf("%w: tag listing of more than %d tags", ErrLimit, maxTags)
		}
	}
	return tags, nil
}

// Fetch resolves src and reads its artifact, unless its digest is last
// (the digest of the caller's previous Fetch): then Unchanged is set and
// nothing else was read.
func (c *Client) Fetch(ctx context.Context, src Source, last string) (*Artifact, error) {
	ctx, cancel := context.WithTimeout(ctx, c.limits.Timeout)
	defer cancel()
	repo, creds, err := repository(src.URL, src.Insecure, src.DockerConfigJSON)
	if err != nil {
		return nil, sourceError(src.URL, err)
	}
	p, key, err := c.puller(repo, src.Insecure, creds)
	if err != nil {
		return nil, sourceError(src.URL, err)
	}
	r, err := c.resolve(ctx, p, repo, src.Ref)
	if err != nil {
		c.drop(key)
		return nil, sourceError(src.URL, err)
	}
	if r.Digest == last {
		return &Artifact{Resolved: r, Unchanged: true}, nil
	}
	a, err := c.read(ctx, p, repo, r, src.LayerSelector)
	if err != nil {
		c.drop(key)
		return nil, sourceError(src.URL, fmt.Errorf("%s: %w", r.Revision, err))
	}
	return a, nil
}

// read reads the manifest r names and its selected layer.
func (c *Client) read(ctx context.Context, p *remote.Puller, repo name.Repository, r Resolved, sel *LayerSelector) (*Artifact, error) {
	d, err := p.Get(ctx, repo.Digest(r.Digest)) // checks the digest
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", RegistryError(err))
	}
	if int64(len(d.Manifest)) > c.limits.MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes", ErrLimit, len(d.Manifest))
	}
	switch d.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
	default:
		return nil, fmt.Errorf("%w: manifest of media type %q, not an image manifest", ErrRefused, d.MediaType)
	}
	var m v1.Manifest
	if err := json.Unmarshal(d.Manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	op := OperationExtract
	layer, found := v1.Descriptor{}, false
	for _, l := range m.Layers {
		if sel == nil || sel.MediaType == "" || string(l.MediaType) == sel.MediaType {
			layer, found = l, true
			break
		}
	}
	if sel != nil {
		switch sel.Operation {
		case "", OperationExtract:
		case OperationCopy:
			op = OperationCopy
		default:
			return nil, fmt.Errorf("%w: layer operation %q, not extract or copy", ErrRefused, sel.Operation)
		}
	}
	if !found {
		if sel != nil && sel.MediaType != "" {
			return nil, fmt.Errorf("%w: no layer of media type %q", ErrNotFound, sel.MediaType)
		}
		return nil, fmt.Errorf("%w: the manifest has no layer", ErrNotFound)
	}
	b, err := c.layer(ctx, p, repo, layer)
	if err != nil {
		return nil, err
	}
	a := &Artifact{Resolved: r, Annotations: m.Annotations}
	if op == OperationCopy {
		a.Files = map[string][]byte{copyName(layer): b}
		return a, nil
	}
	if a.Files, err = Unpack(b, c.limits); err != nil {
		return nil, fmt.Errorf("layer %s: %w", layer.Digest, err)
	}
	return a, nil
}

// layer downloads a layer: refused before any byte when its descriptor is
// over the limit, read up to its declared size (and the limit) whatever
// the registry sends, and checked against its digest.
func (c *Client) layer(ctx context.Context, p *remote.Puller, repo name.Repository, l v1.Descriptor) ([]byte, error) {
	if l.Size > c.limits.MaxLayerBytes {
		return nil, fmt.Errorf("%w: layer %s declares %d bytes, more than the limit of %d: not downloaded", ErrLimit, l.Digest, l.Size, c.limits.MaxLayerBytes)
	}
	if l.Size < 0 || l.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("%w: layer %s: a sha256 digest and a size are required", ErrRefused, l.Digest)
	}
	rl, err := p.Layer(ctx, repo.Digest(l.Digest.String()))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", l.Digest, RegistryError(err))
	}
	rc, err := rl.Compressed()
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", l.Digest, RegistryError(err))
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", l.Digest, RegistryError(err))
	}
	if int64(len(b)) > l.Size {
		return nil, fmt.Errorf("%w: layer %s is larger than the %d bytes its descriptor declares", ErrRefused, l.Digest, l.Size)
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != l.Digest.String() {
		return nil, fmt.Errorf("%w: layer %s: the bytes downloaded have digest %s", ErrRefused, l.Digest, got)
	}
	return b, nil
}

// copyName is the file name of a copied layer: its title annotation when
// that is a plain file name, else layer.tgz.
func copyName(l v1.Descriptor) string {
	t := l.Annotations["org.opencontainers.image.title"]
	if t != "" && t == path.Base(t) && t != "." && t != ".." && !strings.ContainsAny(t, "/\\\x00") {
		return t
	}
	return "layer.tgz"
}

// sourceError names the artifact's URL.
func sourceError(url string, err error) error {
	return fmt.Errorf("oci %q: %w", url, err)
}

// RegistryError words a registry's error by its status alone: the
// diagnostics a registry sends are its own text, not shown. An error that
// is not a registry's answer is returned as it is.
func RegistryError(err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return err
	}
	switch te.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: the registry answered %d %s", ErrUnauthorized, te.StatusCode, http.StatusText(te.StatusCode))
	case http.StatusNotFound:
		return fmt.Errorf("%w: the registry answered %d %s", ErrNotFound, te.StatusCode, http.StatusText(te.StatusCode))
	}
	return fmt.Errorf("the registry answered %d %s", te.StatusCode, http.StatusText(te.StatusCode))
}

// LimitBodies bounds every body a registry sends through rt to max bytes:
// a longer one ends in an ErrLimit error once max is read.
func LimitBodies(rt http.RoundTripper, max int64) http.RoundTripper {
	return capTransport{rt: rt, max: max}
}

// capTransport bounds every body a registry sends to max bytes.
type capTransport struct {
	rt  http.RoundTripper
	max int64
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	res.Body = &capped{ReadCloser: res.Body, left: t.max}
	return res, nil
}

type capped struct {
	io.ReadCloser
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.ReadCloser.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%w: a registry response is larger than the limit", ErrLimit)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}
