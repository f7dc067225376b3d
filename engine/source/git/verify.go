package git

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
)

// The modes of a git source's verify (v1alpha1.GitVerification.Mode).
const (
	VerifyHEAD       = "HEAD"
	VerifyTag        = "Tag"
	VerifyTagAndHEAD = "TagAndHEAD"
)

// Reasons a verification fails, inside a *source.VerifyError; test for
// them with errors.Is.
var (
	ErrUnsigned      = errors.New("not signed")
	ErrUnknownSigner = errors.New("signed by a key that is not in the Secret")
	ErrBadSignature  = errors.New("bad signature")
)

// sshNamespace is the SSHSIG namespace git signs commits and tags in
// (gpg.format ssh).
const sshNamespace = "git"

// Bounds of a key Secret: a Secret is at most 1 MiB, these keep the work
// of one verification small.
const (
	maxKeyEntries = 64
	maxSSHKeys    = 256
	maxPGPKeys    = 64
)

// Keys are the public keys of a verify.secretRef: OpenPGP key rings and
// SSH public keys. Name says where they were read ("Secret NS/NAME"); a
// message names them by it, never by a key.
type Keys struct {
	Name   string
	pgp    []openpgp.EntityList
	ssh    []ssh.PublicKey
	digest [32]byte
}

// ParseKeys reads the public keys of a Secret's data: each entry holds
// ASCII-armored OpenPGP public keys, or SSH public keys in authorized_keys
// form (one a line; blank lines and # comments skipped), as Flux's
// GitRepository verify Secret does. An entry of neither form, or holding
// a private key, is refused naming the entry. name is the Secret's, for
// messages.
func ParseKeys(name string, data map[string][]byte) (*Keys, error) {
	k := &Keys{Name: name}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s holds no public key", name)
	}
	if len(data) > maxKeyEntries {
		return nil, fmt.Errorf("%s has %d entries: at most %d", name, len(data), maxKeyEntries)
	}
	entries := make([]string, 0, len(data))
	for e := range data {
		entries = append(entries, e)
	}
	slices.Sort(entries)
	h := sha256.New()
	for _, e := range entries {
		b := data[e]
		fmt.Fprintf(h, "%d:%s%d:", len(e), e, len(b))
		h.Write(b)
		if err := k.add(e, b); err != nil {
			return nil, fmt.Errorf("%s: entry %q: %w", name, e, err)
		}
	}
	h.Sum(k.digest[:0])
	if len(k.pgp) == 0 && len(k.ssh) == 0 {
		return nil, fmt.Errorf("%s holds no public key", name)
	}
	return k, nil
}

// add reads one entry.
func (k *Keys) add(entry string, b []byte) error {
	text := bytes.TrimSpace(b)
	switch {
	case len(text) == 0:
		return nil // an empty entry adds nothing
	case bytes.Contains(text, []byte("PRIVATE KEY")):
		return errors.New("holds a private key: give public keys only")
	case bytes.HasPrefix(text, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")):
		// Several armored blocks may follow one another: each is read
		// alone (the armor reader buffers past its block's end).
		const end = "-----END PGP PUBLIC KEY BLOCK-----"
		for _, block := range strings.SplitAfter(string(text), end) {
			if strings.TrimSpace(block) == "" {
				continue
			}
			list, err := openpgp.ReadArmoredKeyRing(strings.NewReader(block))
			if err != nil {
				return fmt.Errorf("not an OpenPGP public key ring: %w", err)
			}
			if k.pgp = append(k.pgp, list); len(k.pgp) > maxPGPKeys {
				return fmt.Errorf("over %d OpenPGP key rings", maxPGPKeys)
			}
		}
		return nil
	}
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return fmt.Errorf("line %d is neither an OpenPGP armored key nor an SSH public key in authorized_keys form", i+1)
		}
		if k.ssh = append(k.ssh, pub); len(k.ssh) > maxSSHKeys {
			return fmt.Errorf("over %d SSH public keys", maxSSHKeys)
		}
	}
	return nil
}

// verifyRequest is what a fetch with verify checks: mode and keys.
type verifyRequest struct {
	mode string
	keys *Keys
}

// flightPart is the request's part of the key of a fetch: callers with
// other keys or another mode share no fetch.
func (v *verifyRequest) flightPart() string {
	if v == nil {
		return ""
	}
	return fmt.Sprintf("%s:%x", v.mode, v.keys.digest)
}

// verdictKey names a verification: of one commit or tag object with one
// set of keys. An object's hash covers its signature.
type verdictKey struct {
	object plumbing.Hash
	keys   [32]byte
}

// maxVerdicts bounds the verdicts a Fetcher keeps; past it they are
// forgotten all at once.
const maxVerdicts = 4096

// verify checks what a fetch of t read, commit, as j's verify asks, before
// its files are read. A verdict is kept per object and keys, so that a
// resync of an unchanged commit costs a map look-up.
func (f *Fetcher) verify(ctx context.Context, sess *session, st storage.Storer, l listing, t target, commit *object.Commit, j *job) error {
	v := j.verify
	if v == nil {
		return nil
	}
	fail := func(what string, err error) error {
		return &source.VerifyError{Source: j.name, What: what, Keys: v.keys.Name, Err: err}
	}
	if v.mode == VerifyTag || v.mode == VerifyTagAndHEAD {
		if !t.name.IsTag() || t.pin != "" {
			return fail("ref "+source.DescribeRef(j.ref), fmt.Errorf("verify mode %s needs a tag: give ref.tag or ref.semver", v.mode))
		}
		short := t.name.Short()
		h, ok := l.hash(t.name)
		if !ok {
			return fail("tag "+short, fmt.Errorf("%w: the remote no longer lists the tag", ErrUnsigned))
		}
		what := fmt.Sprintf("tag %s (%s)", short, h)
		if h == commit.Hash {
			return fail(what, fmt.Errorf("%w: a lightweight tag carries no signature; sign an annotated tag (git tag -s)", ErrUnsigned))
		}
		tag, err := f.tagObject(ctx, sess, st, t.name, h)
		if err != nil {
			return err
		}
		if err := f.verdict(h, v.keys, func() error { return verifyTag(tag, v.keys) }); err != nil {
			return fail(what, err)
		}
	}
	if v.mode == VerifyHEAD || v.mode == VerifyTagAndHEAD || v.mode == "" {
		if err := f.verdict(commit.Hash, v.keys, func() error { return verifyCommit(commit, v.keys) }); err != nil {
			return fail("commit "+commit.Hash.String(), err)
		}
	}
	return nil
}

// tagObject returns the annotated tag h, fetching its ref when the cache
// holds its commit but not the tag (read before through a branch).
func (f *Fetcher) tagObject(ctx context.Context, sess *session, st storage.Storer, name plumbing.ReferenceName, h plumbing.Hash) (*object.Tag, error) {
	tag, err := object.GetTag(st, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		if err = fetchRefs(ctx, sess, st, 1, map[plumbing.ReferenceName]plumbing.Hash{name: h}); err != nil {
			return nil, err
		}
		tag, err = object.GetTag(st, h)
	}
	if err != nil {
		return nil, fmt.Errorf("tag %s (%s): %w", name.Short(), h, err)
	}
	return tag, nil
}

// verdict returns the kept verdict of object with keys, or check's, kept.
func (f *Fetcher) verdict(object plumbing.Hash, keys *Keys, check func() error) error {
	key := verdictKey{object: object, keys: keys.digest}
	f.mu.Lock()
	err, ok := f.verdicts[key]
	f.mu.Unlock()
	if ok {
		return err
	}
	err = check()
	f.mu.Lock()
	if len(f.verdicts) >= maxVerdicts {
		clear(f.verdicts)
	}
	f.verdicts[key] = err
	f.verifications++
	f.mu.Unlock()
	return err
}

// Verifications is how many signatures the Fetcher has checked: a verdict
// found kept is not counted. For tests.
func (f *Fetcher) Verifications() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.verifications
}

// verifyCommit checks commit's signature with keys.
func verifyCommit(c *object.Commit, keys *Keys) error {
	payload := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(payload); err != nil {
		return err
	}
	return verifySignature(c.PGPSignature, payload, keys, func(ring string) error {
		_, err := c.Verify(ring)
		return err
	})
}

// verifyTag checks tag's signature with keys.
func verifyTag(t *object.Tag, keys *Keys) error {
	payload := &plumbing.MemoryObject{}
	if err := t.EncodeWithoutSignature(payload); err != nil {
		return err
	}
	return verifySignature(t.PGPSignature, payload, keys, func(ring string) error {
		_, err := t.Verify(ring)
		return err
	})
}

// verifySignature checks sig, an object's armored signature over payload:
// OpenPGP through go-git's own Verify (pgp, given each key ring armored),
// SSH (git's gpg.format ssh) as SSHSIG in the namespace git, through
// github.com/hiddeco/sshsig.
func verifySignature(sig string, payload *plumbing.MemoryObject, keys *Keys, pgp func(ring string) error) error {
	switch {
	case strings.TrimSpace(sig) == "":
		return ErrUnsigned
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		if len(keys.pgp) == 0 {
			return fmt.Errorf("%w: an OpenPGP signature, and the Secret holds no OpenPGP key", ErrUnknownSigner)
		}
		var bad error
		for _, list := range keys.pgp {
			ring, err := armorRing(list)
			if err != nil {
				return err
			}
			err = pgp(ring)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, pgperrors.ErrUnknownIssuer):
			default:
				bad = err
			}
		}
		if bad != nil {
			return fmt.Errorf("%w: OpenPGP: %w", ErrBadSignature, bad)
		}
		return fmt.Errorf("%w (OpenPGP)", ErrUnknownSigner)
	case strings.HasPrefix(sig, "-----BEGIN SSH SIGNATURE-----"):
		block, rest := pem.Decode([]byte(sig))
		if block == nil || block.Type != sshsig.PEMType {
			return fmt.Errorf("%w: a malformed SSH signature", ErrBadSignature)
		}
		if len(bytes.TrimSpace(rest)) > 0 {
			return fmt.Errorf("%w: more than one signature", ErrBadSignature)
		}
		s, err := sshsig.ParseSignature(block.Bytes)
		if err != nil {
			return fmt.Errorf("%w: a malformed SSH signature: %w", ErrBadSignature, err)
		}
		if s.Namespace != sshNamespace {
			return fmt.Errorf("%w: an SSH signature of namespace %q, not %q", ErrBadSignature, s.Namespace, sshNamespace)
		}
		signer := ssh.FingerprintSHA256(s.PublicKey)
		for _, pub := range keys.ssh {
			if ssh.FingerprintSHA256(pub) != signer {
				continue
			}
			r, err := payload.Reader()
			if err != nil {
				return err
			}
			if err := sshsig.Verify(r, s, pub, s.HashAlgorithm, sshNamespace); err != nil {
				return fmt.Errorf("%w: SSH: %w", ErrBadSignature, err)
			}
			return nil
		}
		return fmt.Errorf("%w (SSH)", ErrUnknownSigner)
	}
	return fmt.Errorf("%w: a signature of a kind that is neither OpenPGP nor SSH", ErrBadSignature)
}

// armorRing gives a key ring back armored, as go-git's Verify reads it.
func armorRing(list openpgp.EntityList) (string, error) {
	var b strings.Builder
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		return "", err
	}
	for _, e := range list {
		if err := e.Serialize(w); err != nil {
			return "", err
		}
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// newVerifyRequest checks src's verify against keys: nil when src has no
// verify; an error when it has one and keys is nil.
func newVerifyRequest(src v1alpha1.GitSource, keys *Keys) (*verifyRequest, error) {
	if src.Verify == nil {
		return nil, nil
	}
	if keys == nil {
		return nil, fmt.Errorf("verify: no keys were read from Secret %q", src.Verify.SecretRef.Name)
	}
	switch src.Verify.Mode {
	case "", VerifyHEAD, VerifyTag, VerifyTagAndHEAD:
	default:
		return nil, fmt.Errorf("verify: mode %q is not HEAD, Tag or TagAndHEAD", src.Verify.Mode)
	}
	return &verifyRequest{mode: src.Verify.Mode, keys: keys}, nil
}
