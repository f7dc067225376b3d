package oci

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Cosign's layout of a signature (cosign sign --key, the format Flux's
// OCIRepository verifies): an image manifest tagged sha256-HEX.sig in the
// artifact's repository, one layer per signature, each a simple-signing
// JSON payload naming the artifact's digest, the base64 signature of the
// payload's bytes in the layer's annotation.
const (
	CosignSimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	CosignSignatureAnnotation    = "dev.cosignproject.cosign/signature"
)

// Reasons a verification fails; test for them with errors.Is.
var (
	// ErrUnsigned: the artifact has no cosign signature at all.
	ErrUnsigned = errors.New("unsigned")
	// ErrNoTrustedSignature: it has signatures, none by the keys.
	ErrNoTrustedSignature = errors.New("no signature by these keys")
	// ErrKeys: the key set is empty or an entry is not a public key.
	ErrKeys = errors.New("keys")
)

// Bounds of the signatures read for one artifact: a signature manifest is
// written by whoever can push to the repository, so it is as hostile as
// the artifact.
const (
	// maxSignatures bounds the layers of a signature manifest (each
	// signing appends one; cosign itself stops at 1000).
	maxSignatures = 256
	// maxSignaturePayload bounds one layer: cosign's payload is a few
	// hundred bytes (more with -a annotations).
	maxSignaturePayload = 64 << 10
	// maxSignatureBytes bounds a signature annotation (base64).
	maxSignatureBytes = 16 << 10
	// maxKeys bounds the public keys of a Secret.
	maxKeys = 64
)

// CosignKeys returns the public keys of a verify Secret's data: its
// entries named *.pub (as Flux names them), PEM (PKIX "PUBLIC KEY": ECDSA,
// RSA or Ed25519, as `cosign generate-key-pair` writes them), each made a
// verifier of SHA-256 signatures as `cosign verify --key` makes it. Its
// errors name the entry, never its content.
func CosignKeys(data map[string][]byte) ([]NamedVerifier, error) {
	var names []string
	for k := range data {
		if strings.HasSuffix(k, ".pub") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no *.pub entry", ErrKeys)
	}
	if len(names) > maxKeys {
		return nil, fmt.Errorf("%w: %d *.pub entries, more than %d", ErrKeys, len(names), maxKeys)
	}
	var keys []NamedVerifier
	for _, n := range names {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(data[n])
		if err != nil {
			return nil, fmt.Errorf("%w: entry %s is not a PEM public key", ErrKeys, n)
		}
		v, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("%w: entry %s: a public key of an unsupported type", ErrKeys, n)
		}
		keys = append(keys, NamedVerifier{Name: n, Verifier: v})
	}
	return keys, nil
}

// NamedVerifier is a public key and the name of its Secret entry.
type NamedVerifier struct {
	Name     string
	Verifier signature.Verifier
}

// SignatureTag is the tag cosign stores the signatures of digest
// (sha256:HEX) under: sha256-HEX.sig.
func SignatureTag(digest string) string {
	return strings.Replace(digest, ":", "-", 1) + ".sig"
}

// VerifyCosign checks that the artifact of src (its URL, Insecure and
// credentials; its Ref is not read) whose manifest digest is digest
// carries a cosign signature by one of keys, in cosign's layout (see
// SignatureTag): one of the signature manifest's layers is a
// simple-signing payload whose signature one key verifies and whose
// critical.image.docker-manifest-digest is digest. The transparency log
// is not consulted, as Flux does not with keys: a signature by a trusted
// key is enough.
//
// A failure to verify wraps ErrUnsigned, ErrNoTrustedSignature or
// ErrKeys; an error reading the registry is returned as it is (the
// source failed, it was not refused). Bounds: the manifest by
// MaxManifestBytes, at most 256 signatures of 64 KiB each, every blob
// checked against its digest; the call by Limits.Timeout.
func (c *Client) VerifyCosign(ctx context.Context, src Source, digest string, keys []NamedVerifier) error {
	ctx, cancel := context.WithTimeout(ctx, c.limits.Timeout)
	defer cancel()
	if len(keys) == 0 {
		return fmt.Errorf("%w: no public key", ErrKeys)
	}
	h, err := v1.NewHash(digest)
	if err != nil || h.Algorithm != "sha256" {
		return fmt.Errorf("%w: digest %q is not sha256:HEX", ErrRefused, digest)
	}
	repo, creds, err := repository(src.URL, src.Insecure, src.DockerConfigJSON)
	if err != nil {
		return sourceError(src.URL, err)
	}
	p, key, err := c.puller(repo, src.Insecure, creds)
	if err != nil {
		return sourceError(src.URL, err)
	}
	tag := SignatureTag(h.String())
	d, err := p.Get(ctx, repo.Tag(tag))
	if err != nil {
		if errors.Is(RegistryError(err), ErrNotFound) {
			return fmt.Errorf("%w: no cosign signature (no tag %s)", ErrUnsigned, tag)
		}
		c.drop(key)
		return sourceError(src.URL, fmt.Errorf("signature manifest %s: %w", tag, RegistryError(err)))
	}
	if int64(len(d.Manifest)) > c.limits.MaxManifestBytes {
		return fmt.Errorf("%w: signature manifest %s: %w: %d bytes", ErrNoTrustedSignature, tag, ErrLimit, len(d.Manifest))
	}
	switch d.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
	default:
		return fmt.Errorf("%w: signature manifest %s of media type %q, not an image manifest", ErrNoTrustedSignature, tag, d.MediaType)
	}
	var m v1.Manifest
	if err := json.Unmarshal(d.Manifest, &m); err != nil {
		return fmt.Errorf("%w: signature manifest %s is not an image manifest", ErrNoTrustedSignature, tag)
	}
	if len(m.Layers) > maxSignatures {
		return fmt.Errorf("%w: signature manifest %s: %w: %d signatures, more than %d", ErrNoTrustedSignature, tag, ErrLimit, len(m.Layers), maxSignatures)
	}
	var why []string // what each signature that did not verify lacked
	for i, l := range m.Layers {
		ok, reason, err := c.checkSignature(ctx, p, repo, l, h.String(), keys)
		if err != nil {
			c.drop(key)
			return sourceError(src.URL, fmt.Errorf("signature %d of %s: %w", i+1, tag, err))
		}
		if ok {
			return nil
		}
		why = append(why, fmt.Sprintf("signature %d: %s", i+1, reason))
	}
	if len(m.Layers) == 0 {
		return fmt.Errorf("%w: signature manifest %s has no signature", ErrUnsigned, tag)
	}
	return fmt.Errorf("%w: %d signature(s) read (%s)", ErrNoTrustedSignature, len(m.Layers), summarize(why))
}

// summarize joins the reasons of the signatures refused, the first few of
// them: a hostile manifest may hold hundreds.
func summarize(why []string) string {
	const show = 4
	if len(why) <= show {
		return strings.Join(why, "; ")
	}
	return strings.Join(why[:show], "; ") + fmt.Sprintf("; %d more", len(why)-show)
}

// checkSignature checks one layer of a signature manifest: ok when one of
// keys verifies its signature and its payload names digest; else reason
// says why not. err is a failure to read the registry.
func (c *Client) checkSignature(ctx context.Context, p *remote.Puller, repo name.Repository, l v1.Descriptor, digest string, keys []NamedVerifier) (ok bool, reason string, err error) {
	if l.MediaType != CosignSimpleSigningMediaType {
		return false, fmt.Sprintf("a layer of media type %q, not %s", l.MediaType, CosignSimpleSigningMediaType), nil
	}
	b64 := l.Annotations[CosignSignatureAnnotation]
	if b64 == "" {
		return false, "no " + CosignSignatureAnnotation + " annotation", nil
	}
	if len(b64) > maxSignatureBytes {
		return false, fmt.Sprintf("a signature of %d bytes, more than %d", len(b64), maxSignatureBytes), nil
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return false, "a signature that is not base64", nil
	}
	if l.Size > maxSignaturePayload || l.Size < 0 {
		return false, fmt.Sprintf("a payload of %d bytes, more than %d: not downloaded", l.Size, maxSignaturePayload), nil
	}
	if l.Digest.Algorithm != "sha256" {
		return false, "a payload without a sha256 digest", nil
	}
	body, err := readBlob(ctx, p, repo.Digest(l.Digest.String()), l)
	if err != nil {
		return false, "", err
	}
	if body == nil {
		return false, "a payload whose bytes do not match its descriptor", nil
	}
	signer := ""
	for _, k := range keys {
		if k.Verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) == nil {
			signer = k.Name
			break
		}
	}
	if signer == "" {
		return false, "not signed by any of the keys", nil
	}
	var sp payload.SimpleContainerImage
	if err := json.Unmarshal(body, &sp); err != nil {
		return false, "signed by " + signer + ", but its payload is not simple-signing JSON", nil
	}
	if sp.Critical.Type != payload.CosignSignatureType {
		return false, fmt.Sprintf("signed by %s, but of type %q, not %q", signer, sp.Critical.Type, payload.CosignSignatureType), nil
	}
	if got := sp.Critical.Image.DockerManifestDigest; got != digest {
		return false, fmt.Sprintf("signed by %s, but for digest %q", signer, truncate(got, 80)), nil
	}
	return true, "", nil
}

// truncate bounds a string a payload carries before it is quoted.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// readBlob reads the blob l describes, at most its declared size, checked
// against its digest: nil, no error, when the registry sent other bytes.
func readBlob(ctx context.Context, p *remote.Puller, ref name.Digest, l v1.Descriptor) ([]byte, error) {
	rl, err := p.Layer(ctx, ref)
	if err != nil {
		return nil, RegistryError(err)
	}
	rc, err := rl.Compressed()
	if err != nil {
		return nil, RegistryError(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, l.Size+1))
	if err != nil {
		return nil, RegistryError(err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != l.Size || "sha256:"+hex.EncodeToString(sum[:]) != l.Digest.String() {
		return nil, nil
	}
	return b, nil
}

// CosignVerifier is the Cache's Verifier of verify.provider cosign (the
// only provider the API allows), reading signatures through c: data is
// the verify Secret's (see CosignKeys), dockerConfigJSON the source's
// credentials, as signatures live in the artifact's repository. A refusal
// is a *source.VerifyError naming the artifact (oci://HOST/REPO@DIGEST);
// its Source is the Cache's to fill in, its Keys the Resolver's (it knows
// the namespace of the Secret); a failure to read the registry is
// returned as it is.
func CosignVerifier(c *Client) Verifier {
	return func(ctx context.Context, src v1alpha1.OCISource, digest string, data map[string][]byte, dockerConfigJSON []byte) error {
		if src.Verify == nil {
			return nil
		}
		refuse := func(err error) error {
			return &source.VerifyError{What: "artifact " + src.URL + "@" + digest, Err: err}
		}
		if src.Verify.Provider != "cosign" {
			return refuse(fmt.Errorf("%w: verify provider %q, not cosign", ErrKeys, src.Verify.Provider))
		}
		keys, err := CosignKeys(data)
		if err != nil {
			return refuse(err)
		}
		err = c.VerifyCosign(ctx, Source{URL: src.URL, Insecure: src.Insecure, DockerConfigJSON: dockerConfigJSON}, digest, keys)
		if errors.Is(err, ErrUnsigned) || errors.Is(err, ErrNoTrustedSignature) || errors.Is(err, ErrKeys) {
			return refuse(err)
		}
		return err
	}
}
