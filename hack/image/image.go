package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The engine's path in the image, its entrypoint, and the evaluation
// worker's (cmd/engine-worker), which the engine starts for every worker
// as the image's environment names it (workerEnv).
const (
	enginePath = "/engine"
	workerPath = "/engine-worker"
	workerEnv  = "MANIFESTSYNC_EVAL_WORKER" // worker.CommandEnv
)

// The binaries of each platform, in the directory compileEngine fills.
const (
	engineFile = "engine"
	workerFile = "engine-worker"
)

// labels are the OCI annotations the image config, every manifest and the
// index carry.
func labels(m Meta) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "manifestsync-engine",
		"org.opencontainers.image.source":   m.Source,
		"org.opencontainers.image.revision": m.Commit,
		"org.opencontainers.image.version":  m.Version,
		"org.opencontainers.image.licenses": m.Licenses,
	}
}

// assemble makes the index: one image per platform, each the shared base
// layer and the platform's engine and worker binaries (bins maps "os/arch"
// to a directory holding engineFile and workerFile), every timestamp
// m.Created.
func assemble(m Meta, b Base, plats []v1.Platform, bins map[string]string) (v1.ImageIndex, error) {
	baseTar, err := tarLayer(baseEntries(b), m.Created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	base, err := gzipLayer(baseTar)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	annotations := labels(m)
	annotations["org.opencontainers.image.created"] = m.Created.Format(time.RFC3339)

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range plats {
		bin, ok := bins[p.String()]
		if !ok {
			return nil, fmt.Errorf("platform %s: no engine binary", p)
		}
		img, err := platformImage(m, p, base, bin)
		if err != nil {
			return nil, fmt.Errorf("platform %s: %w", p, err)
		}
		img = mutate.Annotations(img, annotations).(v1.Image)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return mutate.Annotations(idx, annotations).(v1.ImageIndex), nil
}

// platformImage is the base layer, the engine layer (the engine and its
// worker) and a config that runs the engine as the nonroot user.
func platformImage(m Meta, p v1.Platform, base v1.Layer, bins string) (v1.Image, error) {
	engineBin, err := os.ReadFile(filepath.Join(bins, engineFile))
	if err != nil {
		return nil, fmt.Errorf("engine binary: %w", err)
	}
	workerBin, err := os.ReadFile(filepath.Join(bins, workerFile))
	if err != nil {
		return nil, fmt.Errorf("engine-worker binary: %w", err)
	}
	engineTar, err := tarLayer([]entry{{Name: enginePath, Mode: 0o755, Data: engineBin}, {Name: workerPath, Mode: 0o755, Data: workerBin}}, m.Created)
	if err != nil {
		return nil, fmt.Errorf("engine layer: %w", err)
	}
	engine, err := gzipLayer(engineTar)
	if err != nil {
		return nil, fmt.Errorf("engine layer: %w", err)
	}
	created := v1.Time{Time: m.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: users, CA certificates (Debian ca-certificates), /tmp"}},
		mutate.Addendum{Layer: engine, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image: " + enginePath + " and " + workerPath + " " + m.Version + " (" + m.Commit + ")"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant, cf.OSVersion = p.OS, p.Architecture, p.Variant, p.OSVersion
	cf.Config = v1.Config{
		User:       fmt.Sprint(nonrootUID),
		Entrypoint: []string{enginePath},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", workerEnv + "=" + workerPath},
		Labels:     labels(m),
	}
	return mutate.ConfigFile(img, cf)
}

// writeLayout replaces dir with an OCI layout holding idx, named ref (the
// org.opencontainers.image.ref.name annotation). It writes beside dir and
// renames, so a failed build leaves the last layout whole.
func writeLayout(dir string, idx v1.ImageIndex, ref string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
	})); err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// readLayout returns the one index a layout writeLayout wrote holds.
func readLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s (run make image): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("OCI layout %s: want one image index, found %d entries", dir, len(im.Manifests))
	}
	return top.ImageIndex(im.Manifests[0].Digest)
}

// push sends the layout's index to the registry as ref (host/repo:tag),
// with the credentials of the Docker config (~/.docker/config.json) when
// it names the host. It returns the reference and the index's digest.
func push(ctx context.Context, dir, ref string) (name.Reference, v1.Hash, error) {
	idx, err := readLayout(dir)
	if err != nil {
		return nil, v1.Hash{}, err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("image %q: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if err := remote.WriteIndex(r, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return nil, v1.Hash{}, fmt.Errorf("push %s: %w", r, err)
	}
	return r, d, nil
}

// describe prints the index digest and each platform's manifest digest
// and compressed size.
func describe(w io.Writer, dir string, idx v1.ImageIndex, m Meta, took time.Duration) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s (version %s, commit %s, %s)\n", dir, d, m.Version, m.Commit, took.Round(time.Second))
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return err
		}
		size, err := compressedSize(img)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  %-12s %s %.1f MB\n", desc.Platform, desc.Digest, float64(size)/1e6)
	}
	return nil
}

func compressedSize(img v1.Image) (int64, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			return 0, err
		}
		total += s
	}
	return total, nil
}
