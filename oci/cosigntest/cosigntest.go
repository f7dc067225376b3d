// Package cosigntest signs artifacts for tests as `cosign sign --key`
// does, in cosign's legacy layout (the one Flux's OCIRepository
// verifies): a key pair as `cosign generate-key-pair` makes it, the
// simple-signing payload that sigstore's payload.Cosign marshals (the call
// cosign's sign command makes), its signature, and the signature manifest
// tagged sha256-HEX.sig with one layer per signature. It is for tests
// only; nothing in the product imports it.
//
// The layout is written with go-containerregistry, as cosign's
// pkg/oci/static, pkg/oci/mutate and pkg/oci/remote write it: linking
// cosign's module only for the tests would move ten of the product's
// dependencies (zap, fsnotify, go-openapi...) to newer versions.
package cosigntest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Media type and annotation of a signature layer, as cosign writes them.
const (
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation    = "dev.cosignproject.cosign/signature"
)

// Key is a key pair as `cosign generate-key-pair` makes it (ECDSA P-256);
// Pub is its public half as cosign.pub holds it (PEM, PKIX).
type Key struct {
	Signer signature.SignerVerifier
	Pub    []byte
}

// NewKey makes a Key.
func NewKey(t testing.TB) Key {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return Key{Signer: sv, Pub: pub}
}

// Signature is one layer of a signature manifest: a payload and the
// base64 signature of its bytes.
type Signature struct {
	Payload []byte
	B64     string
}

// Sign signs payload p with k.
func Sign(t testing.TB, k Key, p []byte) Signature {
	t.Helper()
	sig, err := k.Signer.SignMessage(bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	return Signature{Payload: p, B64: base64.StdEncoding.EncodeToString(sig)}
}

// SignDigest is the signature `cosign sign --key` makes of the image ref
// names: the simple-signing payload of ref's digest, signed with k.
func SignDigest(t testing.TB, k Key, ref name.Digest) Signature {
	t.Helper()
	p, err := (&payload.Cosign{Image: ref}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return Sign(t, k, p)
}

// Tag is the tag of the signatures of digest (sha256:HEX): sha256-HEX.sig.
func Tag(digest string) string {
	return "sha256-" + digest[len("sha256:"):] + ".sig"
}

// Write writes sigs as the signature manifest of digest in repo,
// replacing any: an OCI image manifest whose config has the media type
// application/vnd.oci.image.config.v1+json (cosign's empty signature
// image), one simple-signing layer per signature, in order, the
// signature in the layer's annotation.
func Write(t testing.TB, repo name.Repository, digest string, sigs ...Signature) {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, s := range sigs {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(s.Payload, SimpleSigningMediaType),
			Annotations: map[string]string{SignatureAnnotation: s.B64},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := remote.Write(repo.Tag(Tag(digest)), img); err != nil {
		t.Fatal(err)
	}
}
