package git

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
)

func TestFromSecretData(t *testing.T) {
	t.Parallel()
	a := FromSecretData(map[string][]byte{
		"username": []byte("u"), "password": []byte("p"), "bearerToken": []byte("tok"),
		"ssh-privatekey": []byte("KEY"), "known_hosts": []byte("KH"), "caFile": []byte("CA"),
	})
	if a.Username != "u" || a.Password != "p" || a.BearerToken != "tok" ||
		string(a.SSHIdentity) != "KEY" || string(a.KnownHosts) != "KH" || string(a.CABundle) != "CA" {
		t.Errorf("auth = %+v", a)
	}
	if string(a.SSHPassphrase) != "p" {
		t.Errorf("passphrase = %q, want the password, as Flux reads it", a.SSHPassphrase)
	}
	a = FromSecretData(map[string][]byte{"identity": []byte("ID"), "ssh-privatekey": []byte("KEY"), "passphrase": []byte("pp")})
	if string(a.SSHIdentity) != "ID" || string(a.SSHPassphrase) != "pp" {
		t.Errorf("auth = %+v", a)
	}
	if a := FromSecretData(nil); a == nil || a.Username != "" || a.SSHIdentity != nil {
		t.Errorf("auth from no data = %+v", a)
	}
}

func TestParseRemote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw, display, key, user, password string
	}{
		{"https://user:secret@Example.com:443/org/repo.git/", "https://example.com/org/repo.git/", "https://example.com/org/repo.git", "user", "secret"},
		{"http://127.0.0.1:8080/repo.git", "http://127.0.0.1:8080/repo.git", "http://127.0.0.1:8080/repo.git", "", ""},
		{"ssh://git@github.com/org/repo.git", "ssh://github.com/org/repo.git", "ssh://github.com/org/repo.git", "git", ""},
		{"git@github.com:org/repo.git", "ssh://github.com/org/repo.git", "ssh://github.com/org/repo.git", "git", ""},
		{"git://host:9418/repo", "git://host/repo", "git://host/repo", "", ""},
	}
	for _, tt := range tests {
		r, err := parseRemote(tt.raw)
		if err != nil {
			t.Errorf("%s: %v", tt.raw, err)
			continue
		}
		if strings.ToLower(r.display) != tt.display || r.key != tt.key || r.user != tt.user || r.password != tt.password {
			t.Errorf("%s: display %s, key %s, user %q, password %q", tt.raw, r.display, r.key, r.user, r.password)
		}
		if r.ep.Password != "" || (isHTTP(r.ep.Protocol) && r.ep.User != "") {
			t.Errorf("%s: go-git would see credentials: %+v", tt.raw, r.ep)
		}
	}
	for _, raw := range []string{"file:///tmp/repo", "/tmp/repo", "ftp://host/repo"} {
		if _, err := parseRemote(raw); err == nil || !strings.Contains(err.Error(), "unsupported URL scheme") {
			t.Errorf("%s: error %v, want unsupported scheme", raw, err)
		}
	}
	if got := stripUserinfo("https://u:p@host/x"); got != "https://host/x" {
		t.Errorf("stripUserinfo = %s", got)
	}
}

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", ".": "", "./": "", "./deploy/": "deploy", "a/../b": "b", "a//b": "a/b"} {
		if got, err := cleanPath(in); err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x", "/etc"} {
		if _, err := cleanPath(in); err == nil {
			t.Errorf("cleanPath(%q) succeeded", in)
		}
	}
}

// testListing builds a listing: name -> hash, "name^{}" for peeled tags,
// "ref: target" for symbolic refs.
func testListing(refs map[string]string) listing {
	l := listing{refs: map[plumbing.ReferenceName]*plumbing.Reference{}, peeled: map[plumbing.ReferenceName]plumbing.Hash{}}
	for name, v := range refs {
		if base, ok := strings.CutSuffix(name, "^{}"); ok {
			l.peeled[plumbing.ReferenceName(base)] = plumbing.NewHash(v)
			continue
		}
		l.refs[plumbing.ReferenceName(name)] = plumbing.NewReferenceFromStrings(name, v)
	}
	return l
}

func hash(c byte) string { return strings.Repeat(string(c), 40) }

func TestResolve(t *testing.T) {
	t.Parallel()
	l := testListing(map[string]string{
		"HEAD":                   "ref: refs/heads/main",
		"refs/heads/main":        hash('1'),
		"refs/tags/v1.0.0":       hash('2'),
		"refs/tags/1.1.0":        hash('3'),
		"refs/tags/v1.1.0":       hash('4'),
		"refs/tags/v1.2.0-rc.1":  hash('5'),
		"refs/tags/v2.0.0":       hash('a'),
		"refs/tags/v2.0.0^{}":    hash('b'),
		"refs/tags/release-2024": hash('6'),
	})
	tests := []struct {
		ref             v1alpha1.GitRef
		rev, name, pin  string
		commitOfListing string
	}{
		{v1alpha1.GitRef{}, "HEAD@sha1:", "refs/heads/main", "", hash('1')},
		{v1alpha1.GitRef{Tag: "v2.0.0"}, "v2.0.0@sha1:", "refs/tags/v2.0.0", "", hash('b')},
		{v1alpha1.GitRef{SemVer: "1.x"}, "1.1.0@sha1:", "refs/tags/1.1.0", "", hash('3')}, // ties go to the first name
		{v1alpha1.GitRef{SemVer: ">=1.2.0-0 <2"}, "v1.2.0-rc.1@sha1:", "refs/tags/v1.2.0-rc.1", "", hash('5')},
		{v1alpha1.GitRef{SemVer: "<1.2"}, "1.1.0@sha1:", "refs/tags/1.1.0", "", hash('3')},
		{v1alpha1.GitRef{Commit: "BBBBBBB"}, "sha1:", "refs/tags/v2.0.0", "bbbbbbb", hash('b')},
		{v1alpha1.GitRef{Commit: "ccccccc"}, "sha1:", "", "ccccccc", ""},
	}
	for _, tt := range tests {
		got, err := resolve(tt.ref, l)
		if err != nil {
			t.Errorf("%s: %v", source.DescribeRef(tt.ref), err)
			continue
		}
		want := target{name: plumbing.ReferenceName(tt.name), pin: tt.pin}
		if tt.commitOfListing != "" {
			want.commit = plumbing.NewHash(tt.commitOfListing)
		}
		if rev := got.revision(plumbing.NewHash(hash('f'))); rev != tt.rev+hash('f') || got.name != want.name || got.pin != want.pin || got.commit != want.commit {
			t.Errorf("%s: got %+v (revision %s)", source.DescribeRef(tt.ref), got, rev)
		}
	}
	if _, err := resolve(v1alpha1.GitRef{}, testListing(map[string]string{"refs/heads/x": hash('1')})); !errors.Is(err, ErrRefNotFound) ||
		!strings.Contains(err.Error(), "no HEAD; the remote has branches x") {
		t.Errorf("no HEAD: %v", err)
	}
}

func TestFew(t *testing.T) {
	t.Parallel()
	names := strings.Fields("a b c d e f g h i j k l")
	if got := few(names); got != "a, b, c, d, e, f, g, h, i, j and 2 more" {
		t.Errorf("few = %q", got)
	}
	if got := few(nil); got != "none" {
		t.Errorf("few(nil) = %q", got)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	base := errors.New("dial https://bob:hunter22@host: token s3cr3t-token, pw abc")
	err := redact(base, []string{"hunter22", "s3cr3t-token", "abc", ""})
	if got := err.Error(); got != "dial https://bob:***@host: token ***, pw abc" {
		t.Errorf("redacted = %q", got)
	}
	if !errors.Is(err, base) {
		t.Error("redacted error does not wrap the original")
	}
}

func TestKnownHosts(t *testing.T) {
	t.Parallel()
	key := newHostKey(t)
	other := newHostKey(t)
	line := func(hosts string, k ssh.PublicKey) string {
		return hosts + " " + string(ssh.MarshalAuthorizedKey(k))
	}
	hashed := knownhosts.HashHostname("[git.example.com]:2222")
	tests := []struct {
		name, knownHosts, addr string
		wantErr                string
	}{
		{"plain", line("git.example.com", key), "git.example.com:22", ""},
		{"port", line("[git.example.com]:2222", key), "git.example.com:2222", ""},
		{"port must match", line("git.example.com", key), "git.example.com:2222", "not in known_hosts"},
		{"hashed", line(hashed, key), "git.example.com:2222", ""},
		{"wildcard", line("*.example.com", key), "git.example.com:22", ""},
		{"question mark", line("gi?.example.com", key), "git.example.com:22", ""},
		{"negated", line("*.example.com,!git.example.com", key), "git.example.com:22", "not in known_hosts"},
		{"case", line("GIT.example.com", key), "git.example.com:22", ""},
		{"mismatch", line("git.example.com", other), "git.example.com:22", "does not match known_hosts"},
		{"one of several keys", line("git.example.com", other) + line("git.example.com", key), "git.example.com:22", ""},
		{"revoked", line("git.example.com", key) + "@revoked " + line("*", key), "git.example.com:22", "revoked"},
		{"cert authority lines are skipped", "@cert-authority " + line("*", other) + line("git.example.com", key), "git.example.com:22", ""},
	}
	for _, tt := range tests {
		check, algos, err := hostKeyCallback([]byte("# comment\n"+tt.knownHosts), tt.addr)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		err = check(tt.addr, nil, key)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
		}
		if tt.wantErr == "" && (len(algos) == 0 || algos[0] != ssh.KeyAlgoED25519) {
			t.Errorf("%s: algorithms %q", tt.name, algos)
		}
	}
	if _, _, err := hostKeyCallback([]byte("# nothing\n"), "h:22"); !errors.Is(err, ErrHostKey) {
		t.Errorf("empty known_hosts: %v", err)
	}
	if _, _, err := hostKeyCallback([]byte("host not-a-key\n"), "h:22"); err == nil {
		t.Error("a malformed known_hosts was accepted")
	}
}

func newHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
