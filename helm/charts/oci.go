package charts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/manifestsync/manifestsync/oci"
)

// ociState is what the Fetcher keeps of registries: a puller per registry
// and credentials (so that the ping and the token of a registry are not
// asked again every poll), and the chart layer of each manifest seen.
type ociState struct {
	mu      sync.Mutex
	pullers map[string]*remote.Puller
	layers  map[string]v1.Descriptor // manifest digest -> chart layer
}

func newOCIState() *ociState {
	return &ociState{pullers: map[string]*remote.Puller{}, layers: map[string]v1.Descriptor{}}
}

// puller returns the puller of reg with auth, made on first use.
func (f *Fetcher) puller(client *http.Client, user, password, key string) (*remote.Puller, error) {
	s := f.oci
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pullers[key]; ok {
		return p, nil
	}
	var a authn.Authenticator = authn.Anonymous
	if user != "" || password != "" {
		a = &authn.Basic{Username: user, Password: password}
	}
	p, err := remote.NewPuller(
		remote.WithAuth(a),
		remote.WithTransport(oci.LimitBodies(client.Transport, max(f.opts.MaxChartBytes, f.opts.MaxIndexBytes))),
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
		remote.WithUserAgent("manifestsync"),
	)
	if err != nil {
		return nil, err
	}
	if len(s.pullers) >= 64 { // credentials come from Secrets: keep a bounded few
		clear(s.pullers)
	}
	s.pullers[key] = p
	return p, nil
}

// dropPuller forgets the puller of key after a failure: a puller keeps
// the error of its first ping.
func (f *Fetcher) dropPuller(key string) {
	f.oci.mu.Lock()
	delete(f.oci.pullers, key)
	f.oci.mu.Unlock()
}

// pullOCI fetches a chart from a registry: the tag a range picks (one tag
// listing), its manifest (a HEAD; a GET only for a manifest not seen
// before) and, unless the cache holds it, the chart layer.
func (f *Fetcher) pullOCI(ctx context.Context, r ref, auth *Auth) (*pulled, error) {
	var opts []name.Option
	if r.insecure {
		opts = append(opts, name.Insecure)
	}
	repoName := strings.TrimPrefix(r.repo, "oci://") + "/" + r.chart
	repo, err := name.NewRepository(repoName, opts...)
	if err != nil {
		return nil, fmt.Errorf("repository: %w", err)
	}
	host := repo.RegistryStr()
	user, password, err := auth.basic(host)
	if err != nil {
		return nil, err
	}
	if repo.Scheme() == "http" {
		if err := checkPlain("http", host, user, password); err != nil {
			return nil, err
		}
	}
	key := host + "\x00" + fmt.Sprint(r.insecure) + "\x00" + auth.digest()
	client, err := f.clientFor(auth)
	if err != nil {
		return nil, err
	}
	p, err := f.puller(client, user, password, key)
	if err != nil {
		return nil, err
	}
	pl, err := f.pullTag(ctx, p, repo, r)
	if err != nil {
		f.dropPuller(key)
		return nil, ociError(err)
	}
	return pl, nil
}

func (f *Fetcher) pullTag(ctx context.Context, p *remote.Puller, repo name.Repository, r ref) (*pulled, error) {
	version, err := f.ociVersion(ctx, p, repo, r)
	if err != nil {
		return nil, err
	}
	tag := repo.Tag(strings.ReplaceAll(version, "+", "_"))
	head, err := p.Head(ctx, tag)
	if err != nil {
		return nil, err
	}
	f.oci.mu.Lock()
	layer, seen := f.oci.layers[head.Digest.String()]
	f.oci.mu.Unlock()
	if !seen {
		if layer, err = f.chartLayer(ctx, p, repo.Digest(head.Digest.String())); err != nil {
			return nil, err
		}
		f.oci.mu.Lock()
		if len(f.oci.layers) >= 4096 {
			clear(f.oci.layers)
		}
		f.oci.layers[head.Digest.String()] = layer
		f.oci.mu.Unlock()
	}
	digest := layer.Digest.String()
	pl := &pulled{chart: r.chart, version: version, digest: digest}
	if c := f.cached(digest); c != nil {
		pl.archive, pl.files = c.archive, c.copyFiles()
		return pl, nil
	}
	if layer.Size > f.opts.MaxChartBytes {
		return nil, fmt.Errorf("%w: chart layer of %d bytes, larger than %d", ErrLimit, layer.Size, f.opts.MaxChartBytes)
	}
	l, err := p.Layer(ctx, repo.Digest(digest))
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed() // checks the digest as it is read
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readBody(rc, f.opts.MaxChartBytes, "chart layer")
	if err != nil {
		return nil, err
	}
	if got := sha256Digest(b); got != digest {
		return nil, fmt.Errorf("chart layer: digest %s, the manifest says %s", got, digest)
	}
	f.downloads.Add(1)
	c, err := f.keep(b, true)
	if err != nil {
		return nil, err
	}
	pl.archive, pl.files = c.archive, c.copyFiles()
	return pl, nil
}

// ociVersion returns the version r asks for: itself when it is one, else
// the newest tag its range matches.
func (f *Fetcher) ociVersion(ctx context.Context, p *remote.Puller, repo name.Repository, r ref) (string, error) {
	if r.version != "" {
		if _, err := semver.StrictNewVersion(strings.TrimPrefix(r.version, "v")); err == nil {
			return r.version, nil
		}
	}
	tags, err := p.List(ctx, repo)
	if err != nil {
		return "", err
	}
	entries := make([]indexEntry, 0, len(tags))
	for _, t := range tags {
		entries = append(entries, indexEntry{version: strings.ReplaceAll(t, "_", "+")})
	}
	e, err := pick(entries, r)
	if err != nil {
		return "", err
	}
	return e.version, nil
}

// chartLayerMediaType is the media type of the layer of a chart pushed by
// helm push (helm.sh/helm/v4/pkg/chartLayerMediaType, whose
// package drags Helm's plugin runtime in).
const chartLayerMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// chartLayer reads the manifest d and returns its Helm chart layer.
func (f *Fetcher) chartLayer(ctx context.Context, p *remote.Puller, d name.Digest) (v1.Descriptor, error) {
	desc, err := p.Get(ctx, d)
	if err != nil {
		return v1.Descriptor{}, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return v1.Descriptor{}, fmt.Errorf("manifest %s: %w", d.DigestStr(), err)
	}
	for _, l := range m.Layers {
		if string(l.MediaType) == chartLayerMediaType {
			return l, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("manifest %s holds no Helm chart layer (%s): not a chart", d.DigestStr(), chartLayerMediaType)
}

// ociError words a registry's error by its status alone: the diagnostics
// a registry sends are its own text, not shown.
func ociError(err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return classify(err)
	}
	return oci.RegistryError(err)
}
