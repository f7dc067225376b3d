package oci_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
	"github.com/manifestsync/manifestsync/oci/cosigntest"
)

func keysOf(t testing.TB, data map[string][]byte) []oci.NamedVerifier {
	t.Helper()
	keys, err := oci.CosignKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// An artifact signed with a cosign key verifies with that key, whatever
// other keys and signatures are beside it; an unsigned one, one signed
// only by another key, and one whose signature names another digest are
// refused, each saying why.
func TestCosignVerify(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Insecure: true}
	alice, mallory := cosigntest.NewKey(t), cosigntest.NewKey(t)
	trusted := keysOf(t, map[string][]byte{"cosign.pub": alice.Pub, "README": []byte("not a key")})
	c := oci.New(oci.Limits{})

	signed := pushFiles(t, reg.Addr, "signed", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	cosigntest.Write(t, repo, signed, cosigntest.SignDigest(t, alice, repo.Digest(signed)))
	t.Run("signed", func(t *testing.T) {
		if err := c.VerifyCosign(ctx, src, signed, trusted); err != nil {
			t.Fatalf("a signed artifact: %v", err)
		}
		// One key of several in the Secret is enough.
		both := keysOf(t, map[string][]byte{"a.pub": mallory.Pub, "b.pub": alice.Pub})
		if err := c.VerifyCosign(ctx, src, signed, both); err != nil {
			t.Fatalf("with the key second of two: %v", err)
		}
	})

	unsigned := pushFiles(t, reg.Addr, "unsigned", map[string][]byte{"a.yaml": []byte("a: 2\n")})
	t.Run("unsigned", func(t *testing.T) {
		err := c.VerifyCosign(ctx, src, unsigned, trusted)
		if !errors.Is(err, oci.ErrUnsigned) || !strings.Contains(err.Error(), oci.SignatureTag(unsigned)) {
			t.Fatalf("got %v; want unsigned, naming the signature tag", err)
		}
		t.Log(err)
	})

	resigned := pushFiles(t, reg.Addr, "resigned", map[string][]byte{"a.yaml": []byte("a: 3\n")})
	cosigntest.Write(t, repo, resigned, cosigntest.SignDigest(t, mallory, repo.Digest(resigned)))
	t.Run("signed by another key", func(t *testing.T) {
		err := c.VerifyCosign(ctx, src, resigned, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "not signed by any of the keys") {
			t.Fatalf("got %v; want refused", err)
		}
		t.Log(err)
		// The other key's own holder verifies it: the signature is good,
		// only not by a trusted key.
		if err := c.VerifyCosign(ctx, src, resigned, keysOf(t, map[string][]byte{"m.pub": mallory.Pub})); err != nil {
			t.Fatalf("with the signer's key: %v", err)
		}
	})

	// alice's genuine signature of the signed artifact, copied under the
	// signature tag of another: its payload names the first digest.
	replayed := pushFiles(t, reg.Addr, "replayed", map[string][]byte{"a.yaml": []byte("evil: true\n")})
	cosigntest.Write(t, repo, replayed, cosigntest.SignDigest(t, alice, repo.Digest(signed)))
	t.Run("signature of another digest", func(t *testing.T) {
		err := c.VerifyCosign(ctx, src, replayed, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "signed by cosign.pub, but for digest \""+signed+"\"") {
			t.Fatalf("got %v; want refused, naming the digest the payload names", err)
		}
		t.Log(err)
	})

	// cosign sign appends: a manifest with mallory's signature first and
	// alice's second verifies.
	appended := pushFiles(t, reg.Addr, "appended", map[string][]byte{"a.yaml": []byte("a: 4\n")})
	cosigntest.Write(t, repo, appended, cosigntest.SignDigest(t, mallory, repo.Digest(appended)), cosigntest.SignDigest(t, alice, repo.Digest(appended)))
	t.Run("second of two signatures", func(t *testing.T) {
		if err := c.VerifyCosign(ctx, src, appended, trusted); err != nil {
			t.Fatal(err)
		}
	})

	// A payload that is not cosign's (another critical.type) is refused
	// even when a trusted key signed it.
	other := pushFiles(t, reg.Addr, "othertype", map[string][]byte{"a.yaml": []byte("a: 5\n")})
	p, _ := json.Marshal(payload.SimpleContainerImage{Critical: payload.Critical{Type: "atomic container signature", Image: payload.Image{DockerManifestDigest: other}}})
	sig, err := alice.Signer.SignMessage(bytes.NewReader(p))
	if err != nil {
		t.Fatal(err)
	}
	cosigntest.Write(t, repo, other, cosigntest.Signature{Payload: p, B64: base64.StdEncoding.EncodeToString(sig)})
	t.Run("payload of another type", func(t *testing.T) {
		err := c.VerifyCosign(ctx, src, other, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "of type") {
			t.Fatalf("got %v", err)
		}
	})
}

// A signature manifest is written by whoever can push to the repository:
// one of too many layers is refused before any blob is read, a layer
// declared larger than a payload is is not downloaded, a payload larger
// than its descriptor says is refused, and a signature that is not
// base64 is one that did not verify.
func TestCosignHostileSignatures(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Insecure: true}
	alice := cosigntest.NewKey(t)
	trusted := keysOf(t, map[string][]byte{"cosign.pub": alice.Pub})
	c := oci.New(oci.Limits{})

	t.Run("many layers", func(t *testing.T) {
		d := pushFiles(t, reg.Addr, "many", map[string][]byte{"a.yaml": []byte("a: 1\n")})
		good := cosigntest.SignDigest(t, alice, repo.Digest(d))
		sigs := make([]cosigntest.Signature, 300)
		for i := range sigs {
			sigs[i] = good // the same layer 300 times: the registry stores it once
		}
		cosigntest.Write(t, repo, d, sigs...)
		mark := len(reg.Log(t))
		err := c.VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !errors.Is(err, oci.ErrLimit) || !strings.Contains(err.Error(), "300 signatures, more than 256") {
			t.Fatalf("got %v", err)
		}
		if got := requests(t, reg, mark); got["GET blobs"] != 0 {
			t.Fatalf("blobs of a refused signature manifest were read: %v", got)
		}
	})

	t.Run("huge layer", func(t *testing.T) {
		d := pushFiles(t, reg.Addr, "huge", map[string][]byte{"a.yaml": []byte("a: 2\n")})
		big := make([]byte, 1<<20)
		huge := cosigntest.Signature{Payload: big, B64: base64.StdEncoding.EncodeToString([]byte("x"))}
		cosigntest.Write(t, repo, d, huge, cosigntest.SignDigest(t, alice, repo.Digest(d)))
		mark := len(reg.Log(t))
		// The trusted signature after it still verifies; the huge layer
		// was not downloaded.
		if err := c.VerifyCosign(ctx, src, d, trusted); err != nil {
			t.Fatal(err)
		}
		if got := requests(t, reg, mark); got["GET blobs"] != 1 {
			t.Fatalf("want only the good payload read, got %v", got)
		}
		cosigntest.Write(t, repo, d, huge)
		err := c.VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "not downloaded") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("lying size", func(t *testing.T) {
		d := pushFiles(t, reg.Addr, "liar", map[string][]byte{"a.yaml": []byte("a: 3\n")})
		s := cosigntest.SignDigest(t, alice, repo.Digest(d))
		layer := static.NewLayer(s.Payload, oci.CosignSimpleSigningMediaType)
		if err := remote.WriteLayer(repo, layer); err != nil {
			t.Fatal(err)
		}
		cfg := static.NewLayer([]byte("{}"), types.OCIConfigJSON)
		if err := remote.WriteLayer(repo, cfg); err != nil {
			t.Fatal(err)
		}
		ld, _ := layer.Digest()
		cd, _ := cfg.Digest()
		m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
			Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: 2, Digest: cd},
			Layers: []v1.Descriptor{{MediaType: oci.CosignSimpleSigningMediaType, Size: 10, Digest: ld, Annotations: map[string]string{oci.CosignSignatureAnnotation: s.B64}}}}
		raw, _ := json.Marshal(m)
		if err := remote.Put(repo.Tag(oci.SignatureTag(d)), rawManifest{raw, types.OCIManifestSchema1}); err != nil {
			t.Fatal(err)
		}
		err := c.VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "do not match its descriptor") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("not base64", func(t *testing.T) {
		d := pushFiles(t, reg.Addr, "b64", map[string][]byte{"a.yaml": []byte("a: 4\n")})
		s := cosigntest.SignDigest(t, alice, repo.Digest(d))
		s.B64 = "%%%"
		cosigntest.Write(t, repo, d, s)
		err := c.VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "not base64") {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("manifest over the limit", func(t *testing.T) {
		d := pushFiles(t, reg.Addr, "bigmanifest", map[string][]byte{"a.yaml": []byte("a: 5\n")})
		s := cosigntest.SignDigest(t, alice, repo.Digest(d))
		s.B64 = strings.Repeat("A", 8<<10)
		cosigntest.Write(t, repo, d, s)
		err := oci.New(oci.Limits{MaxManifestBytes: 4 << 10}).VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrLimit) {
			t.Fatalf("got %v", err)
		}
	})
}

// The keys are the Secret's *.pub entries; a Secret without one, or with
// one that is not a PEM public key, is refused naming the entry and never
// quoting it.
func TestCosignKeys(t *testing.T) {
	k := cosigntest.NewKey(t)
	if keys, err := oci.CosignKeys(map[string][]byte{"cosign.pub": k.Pub, "cosign.key": []byte("ENCRYPTED")}); err != nil || len(keys) != 1 || keys[0].Name != "cosign.pub" {
		t.Fatalf("got %v, %v", keys, err)
	}
	if _, err := oci.CosignKeys(map[string][]byte{"cosign.key": k.Pub}); !errors.Is(err, oci.ErrKeys) || !strings.Contains(err.Error(), "no *.pub entry") {
		t.Fatalf("got %v", err)
	}
	secret := "-----BEGIN PUBLIC KEY-----\nc2VjcmV0IHZhbHVlIDQyNDI=\n-----END PUBLIC KEY-----\n"
	_, err := oci.CosignKeys(map[string][]byte{"a.pub": k.Pub, "bad.pub": []byte(secret)})
	if !errors.Is(err, oci.ErrKeys) || !strings.Contains(err.Error(), "bad.pub") || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
}

// Through a Resolver, as the operator and the CLI read sources: a source
// with verify reads a signed artifact; an unsigned one is a
// *source.VerifyError naming the source, the artifact by digest and the
// Secret with its namespace, and no layer of it is downloaded.
func TestCosignVerifierResolver(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	alice := cosigntest.NewKey(t)
	signed := pushFiles(t, reg.Addr, "signed", map[string][]byte{"cm.yaml": []byte("a: 1\n")})
	cosigntest.Write(t, repo, signed, cosigntest.SignDigest(t, alice, repo.Digest(signed)))
	unsigned := pushFiles(t, reg.Addr, "unsigned", map[string][]byte{"cm.yaml": []byte("a: 2\n")})

	cache := oci.NewCache(oci.CacheOptions{})
	cache.Verify = oci.CosignVerifier(cache.Client)
	secrets := func(_ context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		if ref.Name != "keys" {
			return nil, fmt.Errorf("secretRef %s: not found", ref.Name)
		}
		return map[string][]byte{"cosign.pub": alice.Pub}, nil
	}
	res := source.Resolver{Namespace: "team", OCI: cache.Provider(secrets)}
	src := func(tag string) []v1alpha1.Source {
		return []v1alpha1.Source{{Name: "app", OCI: &v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: tag}, Insecure: true,
			Verify: &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: "keys"}}}}}
	}
	snaps, err := res.Resolve(ctx, src("signed"))
	if err != nil {
		t.Fatal(err)
	}
	if got := snaps["app"]; got == nil || string(got.Files["cm.yaml"]) != "a: 1\n" || got.Revision != "signed@"+signed {
		t.Fatalf("got %+v", got)
	}

	mark := len(reg.Log(t))
	_, err = res.Resolve(ctx, src("unsigned"))
	ve, ok := errors.AsType[*source.VerifyError](err)
	if !ok || ve.Source != "app" || ve.What != "artifact oci://"+reg.Addr+"/app@"+unsigned || ve.Keys != "Secret team/keys" || !errors.Is(err, oci.ErrUnsigned) {
		t.Fatalf("got %#v (%v); want a VerifyError naming the source, the artifact and the Secret", ve, err)
	}
	t.Log(err)
	if got := requests(t, reg, mark); got["GET blobs"] != 0 {
		t.Fatalf("an unverified artifact's blobs were read: %v", got)
	}

	// A Cache without a Verifier never reads a source with verify (a
	// source failure, not a refusal).
	res.OCI = oci.NewCache(oci.CacheOptions{}).Provider(secrets)
	_, err = res.Resolve(ctx, src("signed"))
	if _, ok := errors.AsType[*source.VerifyError](err); ok || !errors.Is(err, oci.ErrVerifyUnavailable) {
		t.Fatalf("a Cache without a Verifier: %v", err)
	}
}

// cosign v3's default layout, a Sigstore bundle attached as an OCI
// referrer (the registry here has no Referrers API: the referrers tag
// sha256-HEX lists it): a bundle signed with a key of the Secret
// verifies, also beside a legacy signature by another key; one signed by
// another key, one whose statement names another digest, an attestation
// of another predicate type, and a bundle declared larger than a
// signature are refused (the last not downloaded).
func TestCosignBundle(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Insecure: true}
	alice, mallory := cosigntest.NewKey(t), cosigntest.NewKey(t)
	trusted := keysOf(t, map[string][]byte{"cosign.pub": alice.Pub})
	c := oci.New(oci.Limits{})
	push := func(tag string) string {
		return pushFiles(t, reg.Addr, tag, map[string][]byte{"a.yaml": []byte(tag + ": 1\n")})
	}

	signed := push("signed")
	cosigntest.WriteBundle(t, repo, signed, cosigntest.Bundle(t, alice, cosigntest.Statement(signed, cosigntest.SignPredicateType)))
	if err := c.VerifyCosign(ctx, src, signed, trusted); err != nil {
		t.Fatalf("a bundle by the key: %v", err)
	}

	mixed := push("mixed")
	cosigntest.Write(t, repo, mixed, cosigntest.SignDigest(t, mallory, repo.Digest(mixed)))
	cosigntest.WriteBundle(t, repo, mixed, cosigntest.Bundle(t, alice, cosigntest.Statement(mixed, cosigntest.SignPredicateType)))
	if err := c.VerifyCosign(ctx, src, mixed, trusted); err != nil {
		t.Fatalf("a bundle by the key beside a legacy signature by another: %v", err)
	}

	for _, tc := range []struct {
		name, why string
		bundle    func(digest string) []byte
	}{
		{"another key", "bundle 1: not signed by any of the keys", func(d string) []byte {
			return cosigntest.Bundle(t, mallory, cosigntest.Statement(d, cosigntest.SignPredicateType))
		}},
		{"another digest", "bundle 1: signed by cosign.pub, but its subject is another digest", func(string) []byte {
			return cosigntest.Bundle(t, alice, cosigntest.Statement(signed, cosigntest.SignPredicateType))
		}},
		{"an attestation", `an attestation of predicate type "https://slsa.dev/provenance/v1"`, func(d string) []byte {
			return cosigntest.Bundle(t, alice, cosigntest.Statement(d, "https://slsa.dev/provenance/v1"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := push(strings.ReplaceAll(tc.name, " ", "-"))
			cosigntest.WriteBundle(t, repo, d, tc.bundle(d))
			err := c.VerifyCosign(ctx, src, d, trusted)
			if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("got %v; want refused: %s", err, tc.why)
			}
			t.Log(err)
		})
	}

	t.Run("huge bundle", func(t *testing.T) {
		d := push("huge")
		big := cosigntest.Bundle(t, alice, make([]byte, 100<<10)) // declared 130 KiB
		cosigntest.WriteBundle(t, repo, d, big)
		mark := len(reg.Log(t))
		err := c.VerifyCosign(ctx, src, d, trusted)
		if !errors.Is(err, oci.ErrNoTrustedSignature) || !strings.Contains(err.Error(), "not downloaded") {
			t.Fatalf("got %v", err)
		}
		if got := requests(t, reg, mark); got["GET blobs"] != 0 {
			t.Fatalf("a bundle over the limit was downloaded: %v", got)
		}
	})
}

// A referrers index of too many Sigstore bundles is refused before any of
// them is read; a hostile signature manifest does not hide a good bundle.
func TestCosignHostileReferrers(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Insecure: true}
	alice := cosigntest.NewKey(t)
	trusted := keysOf(t, map[string][]byte{"cosign.pub": alice.Pub})
	c := oci.New(oci.Limits{})

	d := pushFiles(t, reg.Addr, "many", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	// The registry requires an index's manifests to exist: each entry
	// names the artifact's own manifest, as a bundle.
	self, err := remote.Head(repo.Digest(d))
	if err != nil {
		t.Fatal(err)
	}
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for range 300 {
		idx.Manifests = append(idx.Manifests, v1.Descriptor{MediaType: self.MediaType, Size: self.Size, Digest: self.Digest, ArtifactType: cosigntest.BundleMediaType})
	}
	raw, _ := json.Marshal(idx)
	if err := remote.Put(repo.Tag(strings.Replace(d, ":", "-", 1)), rawManifest{raw, types.OCIImageIndex}); err != nil {
		t.Fatal(err)
	}
	mark := len(reg.Log(t))
	err = c.VerifyCosign(ctx, src, d, trusted)
	if !errors.Is(err, oci.ErrLimit) || !strings.Contains(err.Error(), "300 Sigstore bundles, more than 256") {
		t.Fatalf("got %v", err)
	}
	if got := requests(t, reg, mark); got["GET blobs"] != 0 || got["GET manifests"] > 2 {
		t.Fatalf("bundles of a refused index were read: %v", got)
	}

	// 300 legacy layers (refused) beside a good bundle: verified.
	g := pushFiles(t, reg.Addr, "good", map[string][]byte{"a.yaml": []byte("a: 2\n")})
	sigs := make([]cosigntest.Signature, 300)
	for i := range sigs {
		sigs[i] = cosigntest.SignDigest(t, alice, repo.Digest(g))
	}
	cosigntest.Write(t, repo, g, sigs...)
	cosigntest.WriteBundle(t, repo, g, cosigntest.Bundle(t, alice, cosigntest.Statement(g, cosigntest.SignPredicateType)))
	if err := c.VerifyCosign(ctx, src, g, trusted); err != nil {
		t.Fatalf("a good bundle beside a refused signature manifest: %v", err)
	}
}
