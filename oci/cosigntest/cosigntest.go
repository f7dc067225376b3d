// Package cosigntest signs artifacts for tests as `cosign sign --key`
// does, in both of cosign's layouts: a key pair as `cosign
// generate-key-pair` makes it; the legacy layout (cosign v2, the one
// Flux's OCIRepository verifies): the simple-signing payload that
// sigstore's payload.Cosign marshals (the call cosign's sign command
// makes), its signature, and the signature manifest tagged sha256-HEX.sig
// with one layer per signature (Write); and cosign v3's default: a
// Sigstore bundle holding a DSSE envelope of an in-toto statement, pushed
// as an OCI referrer of the artifact (WriteBundle). It is for tests only;
// nothing in the product imports it.
//
// The layouts are written with go-containerregistry as cosign v3.1.3's
// pkg/oci/static, pkg/oci/mutate and pkg/oci/remote (WriteSignatures,
// WriteAttestationNewBundleFormat) write them: linking cosign's module
// only for the tests would move ten of the product's dependencies (zap,
// fsnotify, go-openapi...) to newer versions.
package cosigntest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Media type and annotation of a signature layer, as cosign writes them.
const (
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation    = "dev.cosignproject.cosign/signature"
)

// Media types of cosign v3's bundle layout.
const (
	BundleMediaType   = "application/vnd.dev.sigstore.bundle.v0.3+json"
	SignPredicateType = "https://sigstore.dev/cosign/sign/v1"
	emptyMediaType    = "application/vnd.oci.empty.v1+json"
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

// Statement is the in-toto statement cosign v3's sign makes of digest
// (sha256:HEX), of predicate type predicateType (SignPredicateType for a
// signature), in protojson's form.
func Statement(digest, predicateType string) []byte {
	b, _ := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"digest": map[string]string{"sha256": strings.TrimPrefix(digest, "sha256:")}}},
		"predicateType": predicateType,
		"predicate":     map[string]any{},
	})
	return b
}

// Bundle is the Sigstore bundle (v0.3, JSON) cosign v3's `sign --key
// --tlog-upload=false` makes of statement: a DSSE envelope of it, signed
// with k over DSSE's pre-authentication encoding, and the key's hint.
func Bundle(t testing.TB, k Key, statement []byte) []byte {
	t.Helper()
	const payloadType = "application/vnd.in-toto+json"
	sig, err := k.Signer.SignMessage(bytes.NewReader(dsse.PAE(payloadType, statement)))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := k.Signer.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	hint := sha256.Sum256(der)
	b, err := json.Marshal(map[string]any{
		"mediaType":            BundleMediaType,
		"verificationMaterial": map[string]any{"publicKey": map[string]string{"hint": base64.StdEncoding.EncodeToString(hint[:])}},
		"dsseEnvelope": map[string]any{
			"payload":     base64.StdEncoding.EncodeToString(statement),
			"payloadType": payloadType,
			"signatures":  []any{map[string]string{"sig": base64.StdEncoding.EncodeToString(sig), "keyid": ""}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WriteBundle pushes bundle as cosign v3 attaches it to the artifact of
// digest in repo: an OCI image manifest of artifact type BundleMediaType,
// the empty config, the bundle as its one layer, the artifact as its
// subject. The registry's Referrers API lists it, or, where there is
// none, the referrers tag sha256-HEX (go-containerregistry keeps it, as
// for cosign).
func WriteBundle(t testing.TB, repo name.Repository, digest string, bundle []byte) {
	t.Helper()
	subject, err := remote.Head(repo.Digest(digest))
	if err != nil {
		t.Fatal(err)
	}
	config := static.NewLayer([]byte("{}"), emptyMediaType)
	layer := static.NewLayer(bundle, BundleMediaType)
	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(repo, l); err != nil {
			t.Fatal(err)
		}
	}
	cd, _ := config.Digest()
	ld, _ := layer.Digest()
	m := struct {
		v1.Manifest
		ArtifactType string `json:"artifactType"`
	}{v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: emptyMediaType, ArtifactType: BundleMediaType, Digest: cd, Size: 2},
		Layers:        []v1.Descriptor{{MediaType: BundleMediaType, Digest: ld, Size: int64(len(bundle))}},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations: map[string]string{
			"org.opencontainers.image.created":  time.Now().UTC().Format(time.RFC3339),
			"dev.sigstore.bundle.content":       "dsse-envelope",
			"dev.sigstore.bundle.predicateType": SignPredicateType,
		},
	}, BundleMediaType}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(repo.Digest(h.String()), rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
}

// rawManifest is an OCI image manifest as it is.
type rawManifest []byte

func (r rawManifest) RawManifest() ([]byte, error)        { return r, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
