package gittest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// A Signer signs the commits and tags of a Work: an *SSHKey (git's own
// gpg.format ssh, which runs ssh-keygen -Y sign), a *GPGKey (git through
// gpg) or a *PGPKey (go-git's OpenPGP signing). A nil Signer leaves them
// unsigned.
type Signer interface{ signer() }

// SSHKey is an ed25519 key made by ssh-keygen.
type SSHKey struct {
	// Path is the private key's file; Path+".pub" the public key's.
	Path string
	// Authorized is the public key in authorized_keys form.
	Authorized string
}

func (*SSHKey) signer() {}

// NewSSHKey makes an ed25519 key with ssh-keygen, without passphrase.
func NewSSHKey(t testing.TB) *SSHKey {
	t.Helper()
	p := filepath.Join(TempDir(t), "id_ed25519")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "signer@manifestsync.dev", "-f", p).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return &SSHKey{Path: p, Authorized: strings.TrimSpace(string(pub))}
}

// PGPKey is an OpenPGP key made with go-crypto.
type PGPKey struct {
	Entity *openpgp.Entity
	// Armored is the public key, ASCII-armored.
	Armored string
}

func (*PGPKey) signer() {}

// NewPGPKey makes an ed25519 OpenPGP key for name.
func NewPGPKey(t testing.TB, name string) *PGPKey {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@manifestsync.dev", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &PGPKey{Entity: e, Armored: b.String()}
}

// GPGKey is an ed25519 OpenPGP key made by gpg in a home of its own;
// commits and tags are signed by git through gpg (git commit -S), as a
// user's are. The home's gpg-agent is stopped when the test ends.
type GPGKey struct {
	Home, Fingerprint string
	// Armored is the public key, as gpg --armor --export prints it.
	Armored string
}

func (*GPGKey) signer() {}

// NewGPGKey makes a key with gpg, without passphrase; it skips the test
// when there is no gpg.
func NewGPGKey(t testing.TB, name string) *GPGKey {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("no gpg")
	}
	home := TempDir(t)
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	gpg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("gpg", append([]string{"--batch", "--homedir", home}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("gpg %v: %v\n%s", args, err, stderr.String())
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run() })
	gpg("--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", name+" <"+name+"@manifestsync.dev>", "ed25519", "sign", "never")
	k := &GPGKey{Home: home}
	for _, line := range strings.Split(gpg("--with-colons", "--list-keys"), "\n") {
		if f := strings.Split(line, ":"); len(f) > 9 && f[0] == "fpr" {
			k.Fingerprint = f[9]
			break
		}
	}
	if k.Fingerprint == "" {
		t.Fatal("gpg made no key")
	}
	k.Armored = gpg("--armor", "--export", k.Fingerprint)
	return k
}

// Work is a clone of a bare repository in which a test commits, tags and
// pushes.
type Work struct {
	t    testing.TB
	Dir  string
	bare string
	env  []string
}

// Clone clones the bare repository (Publish's) into a new Work, on its
// branch main.
func Clone(t testing.TB, bare string) *Work {
	t.Helper()
	home := TempDir(t)
	w := &Work{t: t, Dir: filepath.Join(home, "work"), bare: bare, env: []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=ManifestSync", "GIT_AUTHOR_EMAIL=test@manifestsync.dev",
		"GIT_COMMITTER_NAME=ManifestSync", "GIT_COMMITTER_EMAIL=test@manifestsync.dev",
	}}
	w.git(home, "clone", "-q", "-b", "main", bare, w.Dir)
	return w
}

func (w *Work) git(dir string, args ...string) string {
	w.t.Helper()
	return w.gitEnv(dir, nil, args...)
}

func (w *Work) gitEnv(dir string, env []string, args ...string) string {
	w.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, append(append([]string(nil), w.env...), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(bytes.TrimSpace(out))
}

// Write writes files (path: content) into the work tree.
func (w *Work) Write(files map[string]string) {
	w.t.Helper()
	for p, content := range files {
		full := filepath.Join(w.Dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			w.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
}

// Commit commits the work tree, signed by s, pushes main and returns the
// commit's hash.
func (w *Work) Commit(msg string, s Signer) string {
	w.t.Helper()
	w.git(w.Dir, "add", "-A")
	switch s := s.(type) {
	case nil:
		w.git(w.Dir, "commit", "-q", "--allow-empty", "-m", msg)
	case *SSHKey:
		w.git(w.Dir, "-c", "gpg.format=ssh", "-c", "user.signingkey="+s.Path, "commit", "-q", "--allow-empty", "-S", "-m", msg)
	case *GPGKey:
		w.gitEnv(w.Dir, []string{"GNUPGHOME=" + s.Home}, "-c", "user.signingkey="+s.Fingerprint, "commit", "-q", "--allow-empty", "-S", "-m", msg)
	case *PGPKey:
		_, wt := w.open()
		if _, err := wt.Commit(msg, &git.CommitOptions{AllowEmptyCommits: true, Author: w.sig(), SignKey: s.Entity}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.git(w.Dir, "push", "-q", "origin", "main")
	return w.git(w.Dir, "rev-parse", "HEAD")
}

// Tag makes the annotated tag name of HEAD, signed by s, pushes it and
// returns the tag object's hash.
func (w *Work) Tag(name, msg string, s Signer) string {
	w.t.Helper()
	switch s := s.(type) {
	case nil:
		w.git(w.Dir, "tag", "-a", "-m", msg, name)
	case *SSHKey:
		w.git(w.Dir, "-c", "gpg.format=ssh", "-c", "user.signingkey="+s.Path, "tag", "-s", "-m", msg, name)
	case *GPGKey:
		w.gitEnv(w.Dir, []string{"GNUPGHOME=" + s.Home}, "-c", "user.signingkey="+s.Fingerprint, "tag", "-s", "-m", msg, name)
	case *PGPKey:
		repo, _ := w.open()
		head, err := repo.Head()
		if err != nil {
			w.t.Fatal(err)
		}
		if _, err := repo.CreateTag(name, head.Hash(), &git.CreateTagOptions{Tagger: w.sig(), Message: msg, SignKey: s.Entity}); err != nil {
			w.t.Fatal(err)
		}
	}
	w.git(w.Dir, "push", "-q", "origin", "refs/tags/"+name)
	return w.git(w.Dir, "rev-parse", "refs/tags/"+name)
}

// LightTag makes the lightweight tag name of HEAD and pushes it.
func (w *Work) LightTag(name string) {
	w.t.Helper()
	w.git(w.Dir, "tag", name)
	w.git(w.Dir, "push", "-q", "origin", "refs/tags/"+name)
}

func (w *Work) open() (*git.Repository, *git.Worktree) {
	w.t.Helper()
	repo, err := git.PlainOpen(w.Dir)
	if err != nil {
		w.t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		w.t.Fatal(err)
	}
	return repo, wt
}

func (w *Work) sig() *object.Signature {
	return &object.Signature{Name: "ManifestSync", Email: "test@manifestsync.dev", When: time.Now()}
}
