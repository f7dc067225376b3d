package git

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// signedRepo publishes a repository over git daemon on 127.0.0.1 and
// returns its URL and a clone to commit in.
func signedRepo(t *testing.T) (string, *gittest.Work) {
	t.Helper()
	root, files := t.TempDir(), t.TempDir()
	writeFiles(t, files, map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	gittest.Publish(t, root, "signed", files)
	url := gittest.Daemon(t, root) + "/signed.git"
	return url, gittest.Clone(t, filepath.Join(root, "signed.git"))
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func verifySource(url, mode string, ref v1alpha1.GitRef) v1alpha1.GitSource {
	return v1alpha1.GitSource{URL: url, Ref: ref, Verify: &v1alpha1.GitVerification{Mode: mode, SecretRef: v1alpha1.LocalObjectReference{Name: "keys"}}}
}

func mustKeys(t *testing.T, data map[string]string) *Keys {
	t.Helper()
	d := map[string][]byte{}
	for k, v := range data {
		d[k] = []byte(v)
	}
	k, err := ParseKeys("Secret apps/keys", d)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// verifyErr fetches src and returns its *source.VerifyError, failing
// unless the fetch failed with one that names the keys and what was read.
func verifyErr(t *testing.T, f *Fetcher, src v1alpha1.GitSource, keys *Keys, what string, reason error) *source.VerifyError {
	t.Helper()
	snap, err := f.FetchVerified(context.Background(), "app", src, nil, keys)
	if err == nil {
		t.Fatalf("fetch of %s verified; files %v", what, snap.Files)
	}
	ve, ok := errors.AsType[*source.VerifyError](err)
	if !ok {
		t.Fatalf("error is no *source.VerifyError: %v", err)
	}
	if reason != nil && !errors.Is(err, reason) || ve.Keys != "Secret apps/keys" || !strings.Contains(ve.What, what) || ve.Source != "app" {
		t.Fatalf("error %v: want %v of %s with Secret apps/keys", err, reason, what)
	}
	return ve
}

// TestVerifyCommit: a commit signed by a key of the Secret, SSH (signed by
// git and ssh-keygen) or OpenPGP, is read; an unsigned commit pushed after
// it, or one signed by another key, is refused naming the commit, and no
// file of it is returned; the verdict of an unchanged commit is kept.
func TestVerifyCommit(t *testing.T) {
	sshKey, other := gittest.NewSSHKey(t), gittest.NewSSHKey(t)
	pgpKey, otherPGP := gittest.NewPGPKey(t, "signer"), gittest.NewPGPKey(t, "other")
	gpgKey := gittest.NewGPGKey(t, "release")
	keys := mustKeys(t, map[string]string{
		"ssh":      "# the release key\n" + sshKey.Authorized + "\n",
		"pgp.asc":  pgpKey.Armored,
		"gpg.asc":  gpgKey.Armored,
		"more.pub": "\n",
	})
	for _, c := range []struct {
		name          string
		signer, other gittest.Signer
	}{
		{"ssh", sshKey, other},
		{"openpgp", pgpKey, otherPGP},
		{"gpg", gpgKey, otherPGP},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, w := signedRepo(t)
			f := New(Options{})
			src := verifySource(url, "", v1alpha1.GitRef{Branch: "main"})

			// The published commit is unsigned.
			verifyErr(t, f, src, keys, "commit ", ErrUnsigned)

			w.Write(map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: signed}\n"})
			signed := w.Commit("signed", c.signer)
			snap, err := f.FetchVerified(context.Background(), "app", src, nil, keys)
			if err != nil {
				t.Fatalf("signed commit: %v", err)
			}
			if !strings.HasSuffix(snap.Revision, signed) || !strings.Contains(string(snap.Files["cm.yaml"]), "signed") {
				t.Fatalf("signed commit: revision %s, files %q", snap.Revision, snap.Files)
			}
			n := f.Verifications()
			for range 5 {
				if _, err := f.FetchVerified(context.Background(), "app", src, nil, keys); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.Verifications(); got != n {
				t.Fatalf("5 fetches of an unchanged commit checked %d signatures; want 0", got-n)
			}

			w.Write(map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: unsigned}\n"})
			unsigned := w.Commit("unsigned", nil)
			ve := verifyErr(t, f, src, keys, "commit "+unsigned, ErrUnsigned)
			for _, secret := range []string{sshKey.Authorized, strings.Fields(sshKey.Authorized)[1], pgpKey.Armored} {
				if strings.Contains(ve.Error(), secret) {
					t.Fatalf("error holds a key: %v", ve)
				}
			}
			if !strings.Contains(ve.Error(), `source "app": commit `+unsigned) {
				t.Fatalf("error %q does not name the commit", ve)
			}

			w.Write(map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: other}\n"})
			byOther := w.Commit("other", c.other)
			verifyErr(t, f, src, keys, "commit "+byOther, ErrUnknownSigner)

			// The same commit without verify is read: the refusal is the
			// verify's alone, and shares no fetch with it.
			plain := src
			plain.Verify = nil
			snap, err = f.Fetch(context.Background(), "app", plain, nil)
			if err != nil || !strings.HasSuffix(snap.Revision, byOther) {
				t.Fatalf("without verify: %v, %v", snap, err)
			}
			// And with keys that hold the other key, it verifies.
			otherKeys := mustKeys(t, map[string]string{"k": keyText(c.other)})
			if _, err := f.FetchVerified(context.Background(), "app", src, nil, otherKeys); err != nil {
				t.Fatalf("with the other key: %v", err)
			}
		})
	}
}

func keyText(s gittest.Signer) string {
	switch s := s.(type) {
	case *gittest.SSHKey:
		return s.Authorized
	case *gittest.PGPKey:
		return s.Armored
	case *gittest.GPGKey:
		return s.Armored
	}
	return ""
}

// TestVerifyTag: in the mode Tag the annotated tag read (ref.tag or
// ref.semver) must be signed, whatever its commit; TagAndHEAD needs both.
func TestVerifyTag(t *testing.T) {
	sshKey, pgpKey := gittest.NewSSHKey(t), gittest.NewPGPKey(t, "signer")
	keys := mustKeys(t, map[string]string{"ssh": sshKey.Authorized, "pgp": pgpKey.Armored})
	url, w := signedRepo(t)
	f := New(Options{})

	w.Write(map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: v1}\n"})
	unsignedCommit := w.Commit("v1", nil)
	w.Tag("v1.0.0", "release 1.0.0", sshKey)
	w.Tag("v1.0.1", "release 1.0.1", nil)
	w.Tag("v1.0.2", "release 1.0.2", pgpKey)
	w.LightTag("v1.0.3")

	// Tag: the signed tag of an unsigned commit is read.
	snap, err := f.FetchVerified(context.Background(), "app", verifySource(url, VerifyTag, v1alpha1.GitRef{Tag: "v1.0.0"}), nil, keys)
	if err != nil || !strings.HasPrefix(snap.Revision, "v1.0.0@sha1:"+unsignedCommit) {
		t.Fatalf("signed tag: %v, %v", snap, err)
	}
	if _, err := f.FetchVerified(context.Background(), "app", verifySource(url, VerifyTag, v1alpha1.GitRef{Tag: "v1.0.2"}), nil, keys); err != nil {
		t.Fatalf("OpenPGP-signed tag: %v", err)
	}
	verifyErr(t, f, verifySource(url, VerifyTag, v1alpha1.GitRef{Tag: "v1.0.1"}), keys, "tag v1.0.1", ErrUnsigned)
	verifyErr(t, f, verifySource(url, VerifyTag, v1alpha1.GitRef{Tag: "v1.0.3"}), keys, "tag v1.0.3", ErrUnsigned)
	// semver picks v1.0.3, the highest: a lightweight tag.
	verifyErr(t, f, verifySource(url, VerifyTag, v1alpha1.GitRef{SemVer: "1.0.x"}), keys, "tag v1.0.3", ErrUnsigned)
	// TagAndHEAD: the tag is signed, its commit is not.
	verifyErr(t, f, verifySource(url, VerifyTagAndHEAD, v1alpha1.GitRef{Tag: "v1.0.0"}), keys, "commit "+unsignedCommit, ErrUnsigned)
	// Tag of a branch has no tag to check.
	verifyErr(t, f, verifySource(url, VerifyTag, v1alpha1.GitRef{Branch: "main"}), keys, "ref branch", nil)

	// A signed commit and a signed tag pass TagAndHEAD, and Tag's
	// verdict on a tag read before as a branch's commit (its tag object
	// fetched then).
	w.Write(map[string]string{"cm.yaml": "kind: ConfigMap\nmetadata: {name: v2}\n"})
	w.Commit("v2", sshKey)
	if _, err := f.FetchVerified(context.Background(), "app", verifySource(url, VerifyHEAD, v1alpha1.GitRef{Branch: "main"}), nil, keys); err != nil {
		t.Fatal(err)
	}
	w.Tag("v2.0.0", "release 2", pgpKey)
	snap, err = f.FetchVerified(context.Background(), "app", verifySource(url, VerifyTagAndHEAD, v1alpha1.GitRef{SemVer: ">=2"}), nil, keys)
	if err != nil || !strings.HasPrefix(snap.Revision, "v2.0.0@") {
		t.Fatalf("TagAndHEAD: %v, %v", snap, err)
	}
}

// TestParseKeys: what a Secret of keys may hold, and what a hostile or
// mistaken one gets: a message naming the entry, never its content.
func TestParseKeys(t *testing.T) {
	sshKey, pgpKey := gittest.NewSSHKey(t), gittest.NewPGPKey(t, "signer")
	k := mustKeys(t, map[string]string{"a": sshKey.Authorized + "\n" + gittest.NewSSHKey(t).Authorized, "b": pgpKey.Armored + "\n" + gittest.NewPGPKey(t, "two").Armored})
	if len(k.ssh) != 2 || len(k.pgp) != 2 {
		t.Fatalf("keys: %d SSH, %d OpenPGP; want 2 and 2", len(k.ssh), len(k.pgp))
	}
	a := mustKeys(t, map[string]string{"a": sshKey.Authorized, "b": pgpKey.Armored})
	b := mustKeys(t, map[string]string{"b": pgpKey.Armored, "a": sshKey.Authorized})
	if a.digest != b.digest || a.digest == k.digest {
		t.Fatal("the digest of keys is not that of their entries")
	}
	private := "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
	for _, c := range []struct {
		data map[string][]byte
		want string
	}{
		{map[string][]byte{}, "holds no public key"},
		{map[string][]byte{"e": []byte("\n\n")}, "holds no public key"},
		{map[string][]byte{"id": []byte(private)}, `entry "id": holds a private key`},
		{map[string][]byte{"junk": []byte("not a key at all")}, `entry "junk": line 1 is neither`},
		{map[string][]byte{"pgp": []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nzzzz\n-----END PGP PUBLIC KEY BLOCK-----\n")}, `entry "pgp": not an OpenPGP public key ring`},
	} {
		_, err := ParseKeys("Secret apps/keys", c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "Secret apps/keys") {
			t.Errorf("%v: error %v, want %q", c.data, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "b3BlbnNz") || strings.Contains(err.Error(), "not a key at all")) {
			t.Errorf("error holds the entry's content: %v", err)
		}
	}
}

// TestVerifyWithoutKeys: a source with verify is never read unverified:
// without keys, or through a Provider that cannot read them, it fails.
func TestVerifyWithoutKeys(t *testing.T) {
	url, _ := signedRepo(t)
	f := New(Options{Timeout: 10 * time.Second})
	src := verifySource(url, "", v1alpha1.GitRef{})
	if _, err := f.Fetch(context.Background(), "app", src, nil); err == nil || !strings.Contains(err.Error(), "no keys were read") {
		t.Fatalf("Fetch of a source with verify: %v", err)
	}
	p := Provider{Fetcher: f}
	if _, err := p.FetchGit(context.Background(), "app", src); err == nil || !strings.Contains(err.Error(), "verify: no Secret of keys") {
		t.Fatalf("Provider without Keys: %v", err)
	}
	p.Keys = SecretKeys("apps", func(context.Context, v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		return nil, errors.New(`secret "keys" is forbidden`)
	})
	if _, err := p.FetchGit(context.Background(), "app", src); err == nil || !strings.Contains(err.Error(), `verify: secret "keys" is forbidden`) {
		t.Fatalf("Provider whose Secret is refused: %v", err)
	}
}

// TestVerifySSHSignature: what an SSH signature that is not a good one of
// this commit gets: one made for another namespace (ssh-keygen -Y sign -n
// file, a signature of a file reused as a commit's), one of other content,
// two signatures, and a signature of a kind neither OpenPGP nor SSH.
func TestVerifySSHSignature(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	keys := mustKeys(t, map[string]string{"k": string(ssh.MarshalAuthorizedKey(signer.PublicKey()))})
	who := object.Signature{Name: "a", Email: "a@example.com", When: time.Unix(1700000000, 0).UTC()}
	commit := func(msg string) *object.Commit {
		return &object.Commit{Author: who, Committer: who, Message: msg, TreeHash: plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904")}
	}
	sign := func(c *object.Commit, namespace string) string {
		t.Helper()
		payload := &plumbing.MemoryObject{}
		if err := c.EncodeWithoutSignature(payload); err != nil {
			t.Fatal(err)
		}
		r, _ := payload.Reader()
		s, err := sshsig.Sign(r, signer, sshsig.HashSHA512, namespace)
		if err != nil {
			t.Fatal(err)
		}
		return string(sshsig.Armor(s))
	}
	good := commit("good")
	good.PGPSignature = sign(good, "git")
	if err := verifyCommit(good, keys); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	file := commit("file")
	file.PGPSignature = sign(file, "file")
	tampered := commit("original")
	tampered.PGPSignature = sign(tampered, "git")
	tampered.Message = "changed"
	twice := commit("twice")
	twice.PGPSignature = sign(twice, "git") + sign(twice, "git")
	x509 := commit("x509")
	x509.PGPSignature = "-----BEGIN SIGNED MESSAGE-----\nMIAGCSqGSIb3DQEHAqCAMIACAQEx\n-----END SIGNED MESSAGE-----\n"
	for _, c := range []struct {
		c    *object.Commit
		want string
	}{
		{file, `an SSH signature of namespace "file", not "git"`},
		{tampered, "bad signature: SSH"},
		{twice, "more than one signature"},
		{x509, "neither OpenPGP nor SSH"},
	} {
		err := verifyCommit(c.c, keys)
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("commit %q: %v; want %q", c.c.Message, err, c.want)
		}
	}
}
