package oci

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations Flux writes on an artifact's manifest.
const (
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationCreated  = "org.opencontainers.image.created"
)

// PushOptions say where an artifact comes from and how to reach the
// registry.
type PushOptions struct {
	// Source and Revision are the annotations (a repository URL, and
	// e.g. main@sha1:HASH); empty ones are left out.
	Source, Revision string
	// Created is the created annotation; zero is now. The same files,
	// annotations and Created give the same digest.
	Created time.Time
	// Insecure pushes over plain http.
	Insecure bool
	// DockerConfigJSON is a .dockerconfigjson's content, or nil.
	DockerConfigJSON []byte
	// Limits bound the call (Timeout) and the files (MaxFiles,
	// MaxUnpackedBytes); the layer written is bounded by MaxLayerBytes.
	Limits Limits
}

// Push publishes d to dst (oci://HOST/REPO:TAG) in Flux's layout and
// returns the manifest's digest (sha256:HEX).
func Push(ctx context.Context, d *Dir, dst string, opts PushOptions) (string, error) {
	l := opts.Limits.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	img, err := Image(d, opts)
	if err != nil {
		return "", sourceError(dst, err)
	}
	url, tag, ok := cutTag(dst)
	if !ok {
		return "", sourceError(dst, fmt.Errorf("%w: no tag: give oci://HOST/REPO:TAG", ErrRefused))
	}
	repo, creds, err := repository(url, opts.Insecure, opts.DockerConfigJSON)
	if err != nil {
		return "", sourceError(dst, err)
	}
	if !validTag.MatchString(tag) {
		return "", sourceError(dst, fmt.Errorf("%w: tag %q is not a valid tag", ErrRefused, tag))
	}
	layers, err := img.Layers()
	if err != nil {
		return "", sourceError(dst, err)
	}
	if size, _ := layers[0].Size(); size > l.MaxLayerBytes {
		return "", sourceError(dst, fmt.Errorf("%w: a layer of %d bytes, more than %d", ErrLimit, size, l.MaxLayerBytes))
	}
	if err := remote.Write(repo.Tag(tag), img, append(remoteOptions(newTransport(), l, creds), remote.WithContext(ctx))...); err != nil {
		return "", sourceError(dst, RegistryError(err))
	}
	digest, err := img.Digest()
	if err != nil {
		return "", sourceError(dst, err)
	}
	return digest.String(), nil
}

// Image is the artifact Push writes for d: an OCI image manifest with
// Flux's config media type, one content layer, and the annotations.
func Image(d *Dir, opts PushOptions) (v1.Image, error) {
	tgz, err := Pack(d.Files, d.Exec)
	if err != nil {
		return nil, err
	}
	created := opts.Created
	if created.IsZero() {
		created = time.Now()
	}
	ann := map[string]string{AnnotationCreated: created.UTC().Format(time.RFC3339)}
	if opts.Source != "" {
		ann[AnnotationSource] = opts.Source
	}
	if opts.Revision != "" {
		ann[AnnotationRevision] = opts.Revision
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, FluxConfigMediaType)
	img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(tgz, FluxContentMediaType)})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}

// cutTag splits oci://HOST/REPO:TAG into oci://HOST/REPO and TAG (a colon
// after the last slash: HOST:PORT is not a tag).
func cutTag(ref string) (url, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || i < strings.LastIndex(ref, "/") {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}

// ParseRef splits oci://HOST/REPO:TAG or oci://HOST/REPO@sha256:HEX into
// the repository URL and the Ref, for the commands.
func ParseRef(ref string) (string, Ref, error) {
	if !strings.HasPrefix(ref, "oci://") {
		return "", Ref{}, fmt.Errorf("%w: %q is not oci://HOST/REPO:TAG or oci://HOST/REPO@sha256:HEX", ErrRefused, ref)
	}
	if url, digest, ok := strings.Cut(ref, "@"); ok {
		return url, Ref{Digest: digest}, nil
	}
	if url, tag, ok := cutTag(ref); ok {
		return url, Ref{Tag: tag}, nil
	}
	return ref, Ref{Tag: "latest"}, nil
}
