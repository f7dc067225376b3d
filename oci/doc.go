// Package oci reads and publishes configuration shipped as OCI artifacts,
// the way Flux ships it: `flux push artifact` writes an image manifest
// whose config has the media type application/vnd.cncf.flux.config.v1+json
// and whose one layer, application/vnd.cncf.flux.content.v1.tar+gzip, is a
// gzipped tar of a directory; plain tar+gzip layers are read the same way.
//
// # Reading
//
// Client.Resolve turns a reference (a tag; a semver range, with an
// optional regular expression the tags must match first; or a digest) of
// oci://HOST/REPO into the manifest digest it names: a range lists the
// tags and picks the highest version it matches (Masterminds semver), and
// the chosen tag's digest is asked with a manifest HEAD; a digest is its
// own answer and costs no request. Client.Fetch resolves and, unless the
// digest is the one the caller saw last, reads the manifest (a GET by
// digest) and one layer: so an unchanged poll of a tag is one manifest
// HEAD and no blob. The layer is the first, or the first of
// LayerSelector.MediaType; its operation extract (the default) unpacks it,
// copy gives its bytes as one file. The revision is TAG@sha256:HEX, or
// sha256:HEX for a digest reference, as Flux's OCIRepository writes it.
//
// # Publishing
//
// Push publishes files as `flux push artifact` does: one deterministic
// tar+gzip layer (entries sorted, times zero, no owners), Flux's config
// media type, and the annotations org.opencontainers.image.source,
// .revision and .created. ReadDir reads a directory for it, leaving out
// what Flux leaves out (.git/ and the like, and the patterns of a
// .sourceignore at its root).
//
// # Credentials and limits
//
// Credentials are a .dockerconfigjson's content: the entry of the
// registry's host gives the basic auth or token, and they are never sent
// over plain http (Insecure) to a host other than loopback. Errors name
// the repository and say what the registry answered by its status only:
// neither the registry's own text nor a credential is ever in one.
//
// A layer whose descriptor is larger than Limits.MaxLayerBytes is refused
// before it is downloaded; every body read is bounded all the same (a
// registry may lie about a size), the unpacked files by MaxFiles and
// MaxUnpackedBytes. An archive entry that leaves the artifact's
// directory, a link (symbolic or hard), and a device, FIFO or other
// special file are refused, naming the entry. Every call has a deadline
// (Limits.Timeout) besides its context's.
//
// It does network I/O, so it lives outside the offline core (lang,
// stdlib, engine: engine/deps_test.go); it must not import the operator,
// controller-runtime or client-go.
package oci
