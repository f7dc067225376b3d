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
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
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

// Cosign v3's default layout (cosign sign --key, new bundle format): an
// OCI referrer of the artifact (the Referrers API, or the tag sha256-HEX
// index where the registry has none) of artifact type
// application/vnd.dev.sigstore.bundle.v0.3+json, whose one layer is a
// Sigstore bundle holding a DSSE envelope: an in-toto statement of
// predicate type https://sigstore.dev/cosign/sign/v1 whose subject is the
// artifact's digest, signed (over DSSE's pre-authentication encoding).
const (
	SigstoreBundleMediaType   = "application/vnd.dev.sigstore.bundle.v0.3+json"
	InTotoPayloadType         = "application/vnd.in-toto+json"
	CosignSignPredicateType   = "https://sigstore.dev/cosign/sign/v1"
	sigstoreBundleMediaPrefix = "application/vnd.dev.sigstore.bundle"
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
// carries a cosign signature by one of keys, in either of cosign's
// layouts: the signature manifest tagged sha256-HEX.sig (see
// SignatureTag), one of whose layers is a simple-signing payload that a
// key signed and whose critical.image.docker-manifest-digest is digest;
// or a Sigstore bundle referrer whose DSSE envelope a key signed, an
// in-toto statement of predicate type CosignSignPredicateType whose
// subject is digest. The transparency log is not consulted, as Flux does
// not with keys: a signature by a trusted key is enough.
//
// A failure to verify wraps ErrUnsigned, ErrNoTrustedSignature or
// ErrKeys; an error reading the registry is returned as it is (the
// source failed, it was not refused). Bounds: a manifest by
// MaxManifestBytes, at most 256 signatures of each layout, each of at
// most 64 KiB, every blob checked against its digest; the call by
// Limits.Timeout.
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
	legacy, err := c.legacySignatures(ctx, p, repo, h.String(), keys)
	if err == nil && !legacy.verified {
		var bundles found
		bundles, err = c.bundleSignatures(ctx, p, repo, creds, h.String(), keys)
		if err == nil && !bundles.verified {
			return refusal(h.String(), legacy, bundles)
		}
	}
	if err != nil {
		c.drop(key)
		return sourceError(src.URL, err)
	}
	return nil
}

// found is what the signatures of one layout said.
type found struct {
	verified bool
	// n signatures were read; why says what each that did not verify
	// lacked.
	n   int
	why []string
	// refused is set when the layout's manifest itself was refused (over
	// a bound, not a manifest).
	refused error
}

// refusal is the error of an artifact neither layout verified.
func refusal(digest string, legacy, bundles found) error {
	if legacy.refused != nil {
		return legacy.refused
	}
	if bundles.refused != nil {
		return bundles.refused
	}
	if legacy.n+bundles.n == 0 {
		return fmt.Errorf("%w: no cosign signature (no tag %s, no Sigstore bundle referrer)", ErrUnsigned, SignatureTag(digest))
	}
	return fmt.Errorf("%w: %d signature(s) read (%s)", ErrNoTrustedSignature, legacy.n+bundles.n, summarize(append(legacy.why, bundles.why...)))
}

// legacySignatures reads the signature manifest of digest (cosign's
// sha256-HEX.sig tag) and checks its layers until one verifies.
func (c *Client) legacySignatures(ctx context.Context, p *remote.Puller, repo name.Repository, digest string, keys []NamedVerifier) (found, error) {
	tag := SignatureTag(digest)
	d, err := p.Get(ctx, repo.Tag(tag))
	if err != nil {
		if errors.Is(RegistryError(err), ErrNotFound) {
			return found{}, nil
		}
		return found{}, fmt.Errorf("signature manifest %s: %w", tag, RegistryError(err))
	}
	refuse := func(err error) (found, error) { return found{refused: err}, nil }
	if int64(len(d.Manifest)) > c.limits.MaxManifestBytes {
		return refuse(fmt.Errorf("%w: signature manifest %s: %w: %d bytes", ErrNoTrustedSignature, tag, ErrLimit, len(d.Manifest)))
	}
	switch d.MediaType {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
	default:
		return refuse(fmt.Errorf("%w: signature manifest %s of media type %q, not an image manifest", ErrNoTrustedSignature, tag, d.MediaType))
	}
	var m v1.Manifest
	if err := json.Unmarshal(d.Manifest, &m); err != nil {
		return refuse(fmt.Errorf("%w: signature manifest %s is not an image manifest", ErrNoTrustedSignature, tag))
	}
	if len(m.Layers) > maxSignatures {
		return refuse(fmt.Errorf("%w: signature manifest %s: %w: %d signatures, more than %d", ErrNoTrustedSignature, tag, ErrLimit, len(m.Layers), maxSignatures))
	}
	var f found
	for i, l := range m.Layers {
		ok, reason, err := c.checkSignature(ctx, p, repo, l, digest, keys)
		if err != nil {
			return found{}, fmt.Errorf("signature %d of %s: %w", i+1, tag, err)
		}
		if ok {
			return found{verified: true}, nil
		}
		f.n++
		f.why = append(f.why, fmt.Sprintf("signature %d: %s", i+1, reason))
	}
	return f, nil
}

// bundleSignatures lists the referrers of digest (the Referrers API, or
// the sha256-HEX tag where the registry has none, as go-containerregistry
// falls back) and checks the Sigstore bundles among them until one
// verifies.
func (c *Client) bundleSignatures(ctx context.Context, p *remote.Puller, repo name.Repository, creds *credentials, digest string, keys []NamedVerifier) (found, error) {
	idx, err := remote.Referrers(repo.Digest(digest), append(remoteOptions(c.base, c.limits, creds), remote.WithContext(ctx))...)
	if err != nil {
		if errors.Is(RegistryError(err), ErrNotFound) {
			return found{}, nil
		}
		return found{}, fmt.Errorf("referrers: %w", RegistryError(err))
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return found{}, fmt.Errorf("referrers: %w", RegistryError(err))
	}
	var bundles []v1.Descriptor
	for _, d := range im.Manifests {
		if strings.HasPrefix(d.ArtifactType, sigstoreBundleMediaPrefix) {
			bundles = append(bundles, d)
		}
	}
	if len(bundles) > maxSignatures {
		return found{refused: fmt.Errorf("%w: referrers: %w: %d Sigstore bundles, more than %d", ErrNoTrustedSignature, ErrLimit, len(bundles), maxSignatures)}, nil
	}
	var f found
	for i, d := range bundles {
		ok, reason, err := c.checkBundle(ctx, p, repo, d, digest, keys)
		if err != nil {
			return found{}, fmt.Errorf("bundle %d (%s): %w", i+1, d.Digest, err)
		}
		if ok {
			return found{verified: true}, nil
		}
		f.n++
		f.why = append(f.why, fmt.Sprintf("bundle %d: %s", i+1, reason))
	}
	return f, nil
}

// checkBundle checks one Sigstore bundle referrer: ok when one of keys
// signed its DSSE envelope and the statement is cosign's signature of
// digest; else reason says why not. err is a failure to read the
// registry.
func (c *Client) checkBundle(ctx context.Context, p *remote.Puller, repo name.Repository, d v1.Descriptor, digest string, keys []NamedVerifier) (ok bool, reason string, err error) {
	if d.Size > c.limits.MaxManifestBytes || d.Digest.Algorithm != "sha256" {
		return false, fmt.Sprintf("a manifest of %d bytes: not downloaded", d.Size), nil
	}
	md, err := p.Get(ctx, repo.Digest(d.Digest.String()))
	if err != nil {
		return false, "", fmt.Errorf("manifest: %w", RegistryError(err))
	}
	var m v1.Manifest
	if md.MediaType != types.OCIManifestSchema1 || json.Unmarshal(md.Manifest, &m) != nil {
		return false, fmt.Sprintf("a referrer of media type %q, not an image manifest", md.MediaType), nil
	}
	var layer *v1.Descriptor
	for i := range m.Layers {
		if strings.HasPrefix(string(m.Layers[i].MediaType), sigstoreBundleMediaPrefix) {
			layer = &m.Layers[i]
			break
		}
	}
	if layer == nil {
		return false, "no layer of a Sigstore bundle media type", nil
	}
	if layer.Size > maxSignaturePayload || layer.Size < 0 {
		return false, fmt.Sprintf("a bundle of %d bytes, more than %d: not downloaded", layer.Size, maxSignaturePayload), nil
	}
	if layer.Digest.Algorithm != "sha256" {
		return false, "a bundle without a sha256 digest", nil
	}
	body, err := readBlob(ctx, p, repo.Digest(layer.Digest.String()), *layer)
	if err != nil {
		return false, "", err
	}
	if body == nil {
		return false, "a bundle whose bytes do not match its descriptor", nil
	}
	ok, reason = verifyBundle(body, digest, keys)
	return ok, reason, nil
}

// verifyBundle checks a Sigstore bundle (its JSON form) against keys and
// digest: its DSSE envelope signed by a key (over DSSE's PAE), an in-toto
// statement of cosign's sign predicate type naming digest as a subject.
func verifyBundle(body []byte, digest string, keys []NamedVerifier) (bool, string) {
	var b struct {
		MediaType    string `json:"mediaType"`
		DSSEEnvelope *struct {
			Payload     string `json:"payload"`
			PayloadType string `json:"payloadType"`
			Signatures  []struct {
				Sig string `json:"sig"`
			} `json:"signatures"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(body, &b); err != nil || !strings.HasPrefix(b.MediaType, sigstoreBundleMediaPrefix) {
		return false, "not a Sigstore bundle"
	}
	env := b.DSSEEnvelope
	if env == nil {
		return false, "a bundle without a DSSE envelope (a message signature is not cosign sign's)"
	}
	if env.PayloadType != InTotoPayloadType {
		return false, fmt.Sprintf("a DSSE envelope of payload type %q, not %s", truncate(env.PayloadType, 80), InTotoPayloadType)
	}
	payload, err := decodeBase64(env.Payload)
	if err != nil {
		return false, "a DSSE payload that is not base64"
	}
	if len(env.Signatures) > 16 {
		return false, fmt.Sprintf("a DSSE envelope of %d signatures, more than 16", len(env.Signatures))
	}
	pae := dsse.PAE(env.PayloadType, payload)
	signer := ""
	for _, s := range env.Signatures {
		sig, err := decodeBase64(s.Sig)
		if err != nil {
			continue
		}
		for _, k := range keys {
			if k.Verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(pae)) == nil {
				signer = k.Name
				break
			}
		}
		if signer != "" {
			break
		}
	}
	if signer == "" {
		return false, "not signed by any of the keys"
	}
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || !strings.HasPrefix(st.Type, "https://in-toto.io/Statement/") {
		return false, "signed by " + signer + ", but not an in-toto statement"
	}
	if st.PredicateType != CosignSignPredicateType {
		return false, fmt.Sprintf("signed by %s, but an attestation of predicate type %q, not a signature (%s)", signer, truncate(st.PredicateType, 80), CosignSignPredicateType)
	}
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	for _, sub := range st.Subject {
		if sub.Digest["sha256"] == hexDigest {
			return true, ""
		}
	}
	return false, "signed by " + signer + ", but its subject is another digest"
}

// decodeBase64 decodes the standard or the URL alphabet, padded or not,
// as protobuf's JSON form allows.
func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
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
