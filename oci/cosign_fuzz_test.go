package oci

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore/pkg/signature"
)

// FuzzVerifyBundle: a bundle a registry serves is hostile; whatever its
// bytes, verifyBundle returns (never panics), and only a bundle the key
// signed, of cosign's sign predicate, naming the digest, verifies.
func FuzzVerifyBundle(f *testing.F) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(priv, crypto.SHA256)
	if err != nil {
		f.Fatal(err)
	}
	keys := []NamedVerifier{{Name: "k.pub", Verifier: sv}}
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	bundle := func(statement string) []byte {
		sig, _ := sv.SignMessage(bytes.NewReader(dsse.PAE(InTotoPayloadType, []byte(statement))))
		b, _ := json.Marshal(map[string]any{"mediaType": SigstoreBundleMediaType, "dsseEnvelope": map[string]any{
			"payload": base64.StdEncoding.EncodeToString([]byte(statement)), "payloadType": InTotoPayloadType,
			"signatures": []any{map[string]string{"sig": base64.StdEncoding.EncodeToString(sig)}}}})
		return b
	}
	good := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"` + digest[7:] + `"}}],"predicateType":"` + CosignSignPredicateType + `","predicate":{}}`
	if ok, why := verifyBundle(bundle(good), digest, keys); !ok {
		f.Fatalf("the seed does not verify: %s", why)
	}
	f.Add(bundle(good))
	f.Add(bundle(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"11"}}],"predicateType":"` + CosignSignPredicateType + `"}`))
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","dsseEnvelope":{"payload":"e30=","payloadType":"application/vnd.in-toto+json","signatures":[{"sig":"AA=="}]}}`))
	f.Add([]byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","messageSignature":{}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ok, why := verifyBundle(body, digest, keys)
		if ok && why != "" || !ok && why == "" {
			t.Fatalf("ok %v with reason %q", ok, why)
		}
		if !ok {
			return
		}
		// Verified: the key signed the envelope's statement, which names
		// the digest as cosign's signature.
		var b struct {
			DSSEEnvelope struct {
				Payload string `json:"payload"`
			} `json:"dsseEnvelope"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("verified a bundle that is not JSON: %v", err)
		}
		p, err := decodeBase64(b.DSSEEnvelope.Payload)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			PredicateType string `json:"predicateType"`
		}
		if json.Unmarshal(p, &st) != nil || st.PredicateType != CosignSignPredicateType {
			t.Fatalf("verified a statement of predicate %q", st.PredicateType)
		}
	})
}
