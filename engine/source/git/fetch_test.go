package git

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// testTimeout bounds every fetch of the tests.
const testTimeout = 10 * time.Second

// usage is what a server served: ref listings and fetches over http,
// connections over git:// and ssh (one per listing or fetch), and bytes
// sent to clients.
type usage struct{ listings, fetches, conns, bytes int64 }

func (u usage) minus(v usage) usage {
	return usage{u.listings - v.listings, u.fetches - v.fetches, u.conns - v.conns, u.bytes - v.bytes}
}

// server is a git server publishing the repositories under root.
type server struct {
	root  string
	url   func(repo string) string // of root/repo.git
	auth  *Auth
	usage func() usage
	// unchanged and changed are what a poll costs when the branch did not
	// move and when it did, bytes apart.
	unchanged, changed usage
	// slow says a connection takes long (ssh: a few hundred milliseconds),
	// so cases get a Fetcher each and run in parallel; otherwise they share
	// one, whose fetches of a URL take turns.
	slow bool
}

func httpTransport(t *testing.T) *server {
	root := t.TempDir()
	h := startHTTP(t, root, nil)
	return &server{
		root: root,
		url:  func(repo string) string { return h.URL + "/" + repo + ".git" },
		usage: func() usage {
			return usage{listings: h.listings.Load(), fetches: h.fetches.Load(), bytes: h.bytes.Load()}
		},
		unchanged: usage{listings: 1},
		changed:   usage{listings: 1, fetches: 1},
	}
}

func proxyUsage(p *countingProxy) func() usage {
	return func() usage { return usage{conns: p.conns.Load(), bytes: p.bytes.Load()} }
}

func daemonTransport(t *testing.T) *server {
	root := t.TempDir()
	p := startGitDaemon(t, root)
	return &server{
		root:      root,
		url:       func(repo string) string { return fmt.Sprintf("git://127.0.0.1:%d/%s.git", p.port, repo) },
		usage:     proxyUsage(p),
		unchanged: usage{conns: 1},
		changed:   usage{conns: 1},
	}
}

func sshTransport(t *testing.T) (*server, *sshServer) {
	root := t.TempDir()
	s := startSSHD(t)
	return &server{
		root:      root,
		url:       func(repo string) string { return s.url(root + "/" + repo + ".git") },
		auth:      s.auth(),
		usage:     proxyUsage(s.countingProxy),
		unchanged: usage{conns: 1},
		changed:   usage{conns: 1},
		slow:      true,
	}, s
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	testTransport(t, httpTransport)
}

func TestGitDaemon(t *testing.T) {
	t.Parallel()
	testTransport(t, daemonTransport)
}

func TestSSH(t *testing.T) {
	t.Parallel()
	testTransport(t, func(t *testing.T) *server {
		s, _ := sshTransport(t)
		return s
	})
}

// testTransport runs what every transport must do, on servers made by
// newServer.
func testTransport(t *testing.T, newServer func(*testing.T) *server) {
	s := newServer(t)
	repo := seededRepo(t, s.root, "seeded")
	shared := New(Options{Timeout: testTimeout})
	fetcher := func() *Fetcher {
		if s.slow {
			return New(Options{Timeout: testTimeout})
		}
		return shared
	}
	src := func(ref v1alpha1.GitRef, path string) v1alpha1.GitSource {
		return v1alpha1.GitSource{URL: s.url("seeded"), Ref: ref, Path: path}
	}
	t.Run("refs", func(t *testing.T) {
		t.Parallel()
		testRefs(t, fetcher, repo, s, src)
	})
	t.Run("path", func(t *testing.T) {
		t.Parallel()
		snap := mustFetch(t, fetcher(), src(v1alpha1.GitRef{Tag: "v1.2.0"}, "./deploy/"), s.auth)
		if got := slices.Sorted(maps.Keys(snap.Files)); !slices.Equal(got, []string{"app.yaml"}) {
			t.Errorf("files = %q, want only app.yaml", got)
		}
		if got := string(snap.Files["app.yaml"]); got != "v: 2\n" {
			t.Errorf("app.yaml = %q", got)
		}
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		testErrors(t, fetcher, s, src)
	})
	t.Run("poll", func(t *testing.T) {
		t.Parallel()
		testPoll(t, newServer(t)) // a server of its own, to count what it serves
	})
}

func testRefs(t *testing.T, fetcher func() *Fetcher, repo *testRepo, s *server, src func(v1alpha1.GitRef, string) v1alpha1.GitSource) {
	h := repo.hashes
	tests := []struct {
		name    string
		ref     v1alpha1.GitRef
		wantRev string
		commit  string // label
		app     string
	}{
		{"default is HEAD", v1alpha1.GitRef{}, "HEAD@sha1:", "c4", "v: 4\n"},
		{"branch", v1alpha1.GitRef{Branch: "dev"}, "dev@sha1:", "d1", "dev\n"},
		{"branch full name", v1alpha1.GitRef{Branch: "refs/heads/main"}, "main@sha1:", "c4", "v: 4\n"},
		{"lightweight tag", v1alpha1.GitRef{Tag: "v1.0.0"}, "v1.0.0@sha1:", "c1", "v: 1\n"},
		{"annotated tag", v1alpha1.GitRef{Tag: "v1.2.0"}, "v1.2.0@sha1:", "c2", "v: 2\n"},
		{"semver skips prereleases", v1alpha1.GitRef{SemVer: ">=1.2 <2"}, "v1.2.0@sha1:", "c2", "v: 2\n"},
		{"semver asking for prereleases", v1alpha1.GitRef{SemVer: ">=1.3.0-rc.0 <2"}, "v1.3.0-rc.1@sha1:", "c3", "v: 3-rc\n"},
		{"semver highest", v1alpha1.GitRef{SemVer: ">=1.0.0"}, "v2.0.0@sha1:", "c4", "v: 4\n"},
		{"semver tilde", v1alpha1.GitRef{SemVer: "~1.0"}, "v1.0.0@sha1:", "c1", "v: 1\n"},
		{"commit", v1alpha1.GitRef{Commit: h["m1"]}, "sha1:", "m1", "v: 1.1\n"},
		{"short commit", v1alpha1.GitRef{Commit: h["m1"][:9]}, "sha1:", "m1", "v: 1.1\n"},
		{"short commit at a tip", v1alpha1.GitRef{Commit: h["c3"][:7]}, "sha1:", "c3", "v: 3-rc\n"},
		{"tag wins over branch", v1alpha1.GitRef{Branch: "dev", Tag: "v1.0.0"}, "v1.0.0@sha1:", "c1", "v: 1\n"},
		{"semver wins over tag", v1alpha1.GitRef{Tag: "v1.0.0", SemVer: "^2"}, "v2.0.0@sha1:", "c4", "v: 4\n"},
		{"commit wins over all", v1alpha1.GitRef{Branch: "dev", Tag: "v1.0.0", SemVer: "^2", Commit: h["c2"]}, "sha1:", "c2", "v: 2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			snap := mustFetch(t, fetcher(), src(tt.ref, ""), s.auth)
			if want := tt.wantRev + h[tt.commit]; snap.Revision != want {
				t.Errorf("revision = %s, want %s", snap.Revision, want)
			}
			if want := repo.commitTime(tt.commit); !snap.Time.Equal(want) || snap.Time.Location() != time.UTC {
				t.Errorf("time = %v, want %v", snap.Time, want)
			}
			// Hidden files, the symbolic link and the submodule are left out.
			if got := slices.Sorted(maps.Keys(snap.Files)); !slices.Equal(got, []string{"README.md", "deploy/app.yaml"}) {
				t.Errorf("files = %q", got)
			}
			if got := string(snap.Files["deploy/app.yaml"]); got != tt.app {
				t.Errorf("deploy/app.yaml = %q, want %q", got, tt.app)
			}
		})
	}
}

func testErrors(t *testing.T, fetcher func() *Fetcher, s *server, src func(v1alpha1.GitRef, string) v1alpha1.GitSource) {
	display := s.url("seeded")
	if i := strings.Index(display, "@"); i >= 0 { // ssh: no user in messages
		display = display[:strings.Index(display, "//")+2] + display[i+1:]
	}
	tests := []struct {
		name  string
		ref   v1alpha1.GitRef
		path  string
		is    error
		wants []string
	}{
		{"missing branch", v1alpha1.GitRef{Branch: "nope"}, "", ErrRefNotFound,
			[]string{`branch "nope"`, "ref not found", "branches dev, main"}},
		{"missing tag", v1alpha1.GitRef{Tag: "v9"}, "", ErrRefNotFound,
			[]string{`tag "v9"`, "tags latest, v1.0.0, v1.2.0, v1.3.0-rc.1, v2.0.0"}},
		{"no tag in range", v1alpha1.GitRef{SemVer: ">=9"}, "", ErrRefNotFound,
			[]string{`semver ">=9"`, "no tag matches the range"}},
		{"invalid range", v1alpha1.GitRef{SemVer: "not a range"}, "", nil,
			[]string{"invalid semver range"}},
		{"unknown commit", v1alpha1.GitRef{Commit: "0123456789abcdef"}, "", ErrRefNotFound,
			[]string{`commit "0123456789abcdef"`, "no branch or tag of the remote holds the commit"}},
		{"bad commit", v1alpha1.GitRef{Commit: "xyz"}, "", nil,
			[]string{"not 7 to 40 hexadecimal digits"}},
		{"missing path", v1alpha1.GitRef{}, "nope", ErrPathNotFound,
			[]string{`path "nope" is not in the commit`}},
		{"path to a file", v1alpha1.GitRef{}, "README.md", ErrPathNotFound,
			[]string{`path "README.md" is not a directory`}},
		{"path escaping", v1alpha1.GitRef{}, "deploy/../../etc", nil,
			[]string{"leaves the repository"}},
		{"absolute path", v1alpha1.GitRef{}, "/etc", nil,
			[]string{"must be relative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := fetchErr(t, fetcher(), src(tt.ref, tt.path), s.auth)
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %q", err, tt.is)
			}
			wants := append([]string{`source "app": git ` + display}, tt.wants...)
			for _, want := range wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
	t.Run("missing repository", func(t *testing.T) {
		t.Parallel()
		err := fetchErr(t, fetcher(), v1alpha1.GitSource{URL: s.url("missing")}, s.auth)
		if !errors.Is(err, ErrRepoNotFound) {
			t.Errorf("error %q is not %q", err, ErrRepoNotFound)
		}
	})
}

// testPoll checks what polls cost: nothing but a ref listing when the
// branch did not move, and only the new objects when it did.
func testPoll(t *testing.T, s *server) {
	repo := newTestRepo(t, s.root, "poll")
	big := make([]byte, 256<<10)
	rand.Read(big)
	// text changes by one line, so the server sends its new version as a
	// delta against the old one, which only the cache holds (a thin pack).
	text := randomLines(2000)
	repo.write(map[string]string{"deploy/app.yaml": "v: 1\n", "big.bin": string(big), "text.txt": text})
	repo.commit("p1", "first")
	repo.push()
	f := New(Options{Timeout: testTimeout})
	src := v1alpha1.GitSource{URL: s.url("poll"), Ref: v1alpha1.GitRef{Branch: "main"}}

	u0 := s.usage()
	first := mustFetch(t, f, src, s.auth)
	u1 := s.usage()
	again := mustFetch(t, f, src, s.auth)
	u2 := s.usage()
	if again.Revision != first.Revision || again.Revision != "main@sha1:"+repo.hashes["p1"] {
		t.Errorf("revisions = %s, %s", first.Revision, again.Revision)
	}
	if got := u2.minus(u1); got.listings != s.unchanged.listings || got.fetches != s.unchanged.fetches || got.conns != s.unchanged.conns {
		t.Errorf("an unchanged poll cost %+v, want %+v", got, s.unchanged)
	}

	text2 := strings.Replace(text, "\n", "\nchanged\n", 1)
	repo.change("p2", map[string]string{"deploy/app.yaml": "v: 2\n", "text.txt": text2})
	repo.push()
	next := mustFetch(t, f, src, s.auth)
	u3 := s.usage()
	if want := "main@sha1:" + repo.hashes["p2"]; next.Revision != want {
		t.Errorf("revision = %s, want %s", next.Revision, want)
	}
	if got := string(next.Files["deploy/app.yaml"]); got != "v: 2\n" {
		t.Errorf("deploy/app.yaml = %q", got)
	}
	if len(next.Files["big.bin"]) != len(big) || string(next.Files["text.txt"]) != text2 {
		t.Errorf("big.bin has %d bytes, want %d; text.txt changed wrongly", len(next.Files["big.bin"]), len(big))
	}
	got := u3.minus(u2)
	if got.listings != s.changed.listings || got.fetches != s.changed.fetches || got.conns != s.changed.conns {
		t.Errorf("a poll after a commit cost %+v, want %+v", got, s.changed)
	}
	if clone := u1.minus(u0).bytes; got.bytes*20 > clone {
		t.Errorf("a poll after a commit received %d bytes, the clone %d: it fetched more than the new objects", got.bytes, clone)
	}
	if n := countCommits(t, f, src.URL); n != 2 {
		t.Errorf("the cache holds %d commits, want 2 (shallow fetches)", n)
	}
}

// randomLines returns n lines of random hexadecimal digits.
func randomLines(n int) string {
	var b strings.Builder
	for range n {
		fmt.Fprintf(&b, "%x\n", rand.Text())
	}
	return b.String()
}

// countCommits counts the commits in the cached repository of url.
func countCommits(t *testing.T, f *Fetcher, url string) int {
	t.Helper()
	r, err := parseRemote(url)
	if err != nil {
		t.Fatal(err)
	}
	cr := f.repo(r.key)
	cr.lock <- struct{}{}
	defer func() { <-cr.lock }()
	iter, err := cr.repo.Storer.IterEncodedObjects(plumbing.CommitObject)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := iter.ForEach(func(plumbing.EncodedObject) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustFetch(t *testing.T, f *Fetcher, src v1alpha1.GitSource, auth *Auth) *engine.Snapshot {
	t.Helper()
	snap, err := f.Fetch(context.Background(), "app", src, auth)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func fetchErr(t *testing.T, f *Fetcher, src v1alpha1.GitSource, auth *Auth) error {
	t.Helper()
	snap, err := f.Fetch(context.Background(), "app", src, auth)
	if err == nil {
		t.Fatalf("fetched %s, want an error", snap.Revision)
	}
	return err
}

// TestPinnedCommit checks both ways of fetching a commit no ref points to:
// asking for it with depth 1 where the server allows it, else fetching all
// history.
func TestPinnedCommit(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	strict := seededRepo(t, s.root, "strict")
	open := seededRepo(t, s.root, "open")
	open.git(open.bare, "config", "uploadpack.allowReachableSHA1InWant", "true")
	tests := []struct {
		repo        *testRepo
		name, pin   string
		wantCommits int
	}{
		{open, "open", open.hashes["m1"], 1},
		{open, "open", open.hashes["m1"][:7], 6},
		{strict, "strict", strict.hashes["m1"], 6},
		{strict, "strict", strict.hashes["m1"][:7], 6},
	}
	for _, tt := range tests {
		// Not in parallel: the cases count what the server serves.
		t.Run(tt.name+"/"+tt.pin, func(t *testing.T) {
			f := New(Options{Timeout: testTimeout})
			src := v1alpha1.GitSource{URL: s.url(tt.name), Ref: v1alpha1.GitRef{Commit: tt.pin}}
			snap := mustFetch(t, f, src, nil)
			if want := "sha1:" + tt.repo.hashes["m1"]; snap.Revision != want {
				t.Errorf("revision = %s, want %s", snap.Revision, want)
			}
			if n := countCommits(t, f, src.URL); n != tt.wantCommits {
				t.Errorf("the cache holds %d commits, want %d", n, tt.wantCommits)
			}
			// Once stored, a pinned commit costs a listing.
			before := s.usage()
			mustFetch(t, f, src, nil)
			if got := s.usage().minus(before); got.listings != 1 || got.fetches != 0 {
				t.Errorf("polling a pinned commit cost %+v", got)
			}
		})
	}
	for _, name := range []string{"open", "strict"} {
		t.Run(name+"/unknown", func(t *testing.T) {
			t.Parallel()
			src := v1alpha1.GitSource{URL: s.url(name), Ref: v1alpha1.GitRef{Commit: strings.Repeat("ab", 20)}}
			err := fetchErr(t, New(Options{Timeout: testTimeout}), src, nil)
			if !errors.Is(err, ErrRefNotFound) {
				t.Errorf("error %q is not %q", err, ErrRefNotFound)
			}
		})
	}
}

// TestPinAfterShallowFetch pins an old commit in a repository the cache
// holds shallow, which needs the shallow history deepened.
func TestPinAfterShallowFetch(t *testing.T) {
	t.Parallel()
	s := daemonTransport(t)
	repo := seededRepo(t, s.root, "seeded")
	f := New(Options{Timeout: testTimeout})
	mustFetch(t, f, v1alpha1.GitSource{URL: s.url("seeded")}, nil)
	snap := mustFetch(t, f, v1alpha1.GitSource{URL: s.url("seeded"), Ref: v1alpha1.GitRef{Commit: repo.hashes["m1"][:8]}}, nil)
	if want := "sha1:" + repo.hashes["m1"]; snap.Revision != want {
		t.Errorf("revision = %s, want %s", snap.Revision, want)
	}
	if got := string(snap.Files["deploy/app.yaml"]); got != "v: 1.1\n" {
		t.Errorf("deploy/app.yaml = %q", got)
	}
}

func TestHTTPAuth(t *testing.T) {
	t.Parallel()
	const password, token = "pa55-w0rd-secret", "t0ken-secret-value"
	root := t.TempDir()
	seededRepo(t, root, "seeded")
	basic := startHTTP(t, root, func(s *httpServer) { s.user, s.password = "alice", password })
	bearer := startHTTP(t, root, func(s *httpServer) { s.token = token })
	withUser := func(url, userinfo string) string { return strings.Replace(url, "://", "://"+userinfo+"@", 1) }
	tests := []struct {
		name    string
		url     string
		auth    *Auth
		wantErr bool
	}{
		{"basic", basic.URL + "/seeded.git", &Auth{Username: "alice", Password: password}, false},
		{"basic in URL", withUser(basic.URL, "alice:"+password) + "/seeded.git", nil, false},
		{"wrong password", basic.URL + "/seeded.git", &Auth{Username: "alice", Password: "wrong-" + password}, true},
		{"wrong password in URL", withUser(basic.URL, "alice:wrong-"+password) + "/seeded.git", nil, true},
		{"no credentials", basic.URL + "/seeded.git", nil, true},
		{"bearer", bearer.URL + "/seeded.git", &Auth{BearerToken: token}, false},
		{"wrong bearer", bearer.URL + "/seeded.git", &Auth{BearerToken: "wrong-" + token}, true},
		{"from secret", basic.URL + "/seeded.git", FromSecretData(map[string][]byte{"username": []byte("alice"), "password": []byte(password)}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := New(Options{Timeout: testTimeout})
			snap, err := f.Fetch(context.Background(), "app", v1alpha1.GitSource{URL: tt.url}, tt.auth)
			if !tt.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(snap.Revision, "HEAD@sha1:") {
					t.Errorf("revision = %s", snap.Revision)
				}
				return
			}
			if err == nil {
				t.Fatal("fetched without the right credentials")
			}
			if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "authentication failed") {
				t.Errorf("error %q does not say authentication failed", err)
			}
			for _, secret := range []string{password, token, "alice"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains %q", err, secret)
				}
			}
		})
	}
}

func TestPlainHTTPCredentials(t *testing.T) {
	t.Parallel()
	f := New(Options{Timeout: testTimeout})
	src := v1alpha1.GitSource{URL: "http://bob:hunter2-secret@git.example.com/repo.git"}
	err := fetchErr(t, f, src, nil)
	for _, want := range []string{"refusing to send credentials over plain http", "git http://git.example.com/repo.git"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "bob") {
		t.Errorf("error %q shows credentials", err)
	}
}

func TestSSHHostKeys(t *testing.T) {
	t.Parallel()
	s, sshd := sshTransport(t)
	seededRepo(t, s.root, "seeded")
	other := t.TempDir()
	otherKey := keygen(t, other, "other", "")
	keygen(t, other, "intruder", "")
	intruder := readFile(t, other+"/intruder")
	const passphrase = "open-s3same-phrase"
	encryptedPub := keygen(t, other, "encrypted", passphrase)
	encrypted := readFile(t, other+"/encrypted")
	authorized := string(readFile(t, sshd.dir+"/authorized_keys"))
	writeFile(t, sshd.dir+"/authorized_keys", authorized+encryptedPub+"\n")

	hostPort := fmt.Sprintf("[127.0.0.1]:%d", sshd.port)
	tests := []struct {
		name  string
		auth  *Auth
		is    error
		wants []string
	}{
		{"no known_hosts", &Auth{SSHIdentity: sshd.identity}, ErrHostKey,
			[]string{"no known_hosts given, refusing to trust the server's key blindly"}},
		{"wrong host key", &Auth{SSHIdentity: sshd.identity, KnownHosts: []byte(hostPort + " " + otherKey + "\n")}, ErrHostKey,
			[]string{"host key verification failed", "does not match known_hosts"}},
		{"unknown host", &Auth{SSHIdentity: sshd.identity, KnownHosts: []byte("[127.0.0.1]:1 " + sshd.hostKey + "\n")}, ErrHostKey,
			[]string{"host key verification failed", "not in known_hosts"}},
		{"revoked host key", &Auth{SSHIdentity: sshd.identity, KnownHosts: []byte(hostPort + " " + sshd.hostKey + "\n@revoked * " + sshd.hostKey + "\n")}, ErrHostKey,
			[]string{"revoked"}},
		{"unauthorized identity", &Auth{SSHIdentity: intruder, KnownHosts: sshd.knownHosts}, ErrAuth,
			[]string{"authentication failed"}},
		{"wrong passphrase", &Auth{SSHIdentity: encrypted, SSHPassphrase: []byte("not-" + passphrase), KnownHosts: sshd.knownHosts}, nil,
			[]string{"ssh identity"}},
		{"no identity", &Auth{KnownHosts: sshd.knownHosts}, ErrAuth,
			[]string{"ssh needs an identity"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := New(Options{Timeout: testTimeout})
			err := fetchErr(t, f, v1alpha1.GitSource{URL: s.url("seeded")}, tt.auth)
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %q", err, tt.is)
			}
			for _, want := range tt.wants {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), passphrase) {
				t.Errorf("error %q contains the passphrase", err)
			}
		})
	}
	t.Run("encrypted identity", func(t *testing.T) {
		t.Parallel()
		auth := FromSecretData(map[string][]byte{
			"identity": encrypted, "password": []byte(passphrase), "known_hosts": sshd.knownHosts,
		})
		mustFetch(t, New(Options{Timeout: testTimeout}), v1alpha1.GitSource{URL: s.url("seeded")}, auth)
	})
}

// TestUnreachable fetches from a closed port on 127.0.0.1 over every
// transport.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	port := gittest.FreePort(t)
	sshAuth := sshAuthFor(t, port)
	tests := []struct {
		url  string
		auth *Auth
	}{
		{fmt.Sprintf("http://127.0.0.1:%d/repo.git", port), nil},
		{fmt.Sprintf("https://127.0.0.1:%d/repo.git", port), &Auth{BearerToken: "tok3n-secret"}},
		{fmt.Sprintf("git://127.0.0.1:%d/repo.git", port), nil},
		{fmt.Sprintf("ssh://git@127.0.0.1:%d/repo.git", port), sshAuth},
	}
	for _, tt := range tests {
		t.Run(strings.SplitN(tt.url, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			// Refused at once: far under the timeout, at any load.
			f := New(Options{Timeout: time.Minute})
			start := time.Now()
			err := fetchErr(t, f, v1alpha1.GitSource{URL: tt.url}, tt.auth)
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v", d)
			}
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "host unreachable") {
				t.Errorf("error %q does not say the host is unreachable", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d/repo.git (HEAD)", port)) {
				t.Errorf("error %q does not name the URL and ref", err)
			}
		})
	}
}

// TestTimeout fetches from a server that accepts connections and never
// answers: the fetch ends when Options.Timeout says.
func TestTimeout(t *testing.T) {
	t.Parallel()
	silent := gittest.Blackhole(t)
	for _, scheme := range []string{"git", "http"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			f := New(Options{Timeout: 300 * time.Millisecond})
			start := time.Now()
			err := fetchErr(t, f, v1alpha1.GitSource{URL: fmt.Sprintf("%s://127.0.0.1:%d/repo.git", scheme, silent)}, nil)
			// The server never answers: without the timeout, no end.
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v", d)
			}
			// The fetch's deadline ended it, whichever step's own deadline
			// (as long, started later) the transport noticed first.
			want := fmt.Sprintf("source \"app\": git %s://127.0.0.1:%d/repo.git (HEAD): timed out after 300ms: context deadline exceeded", scheme, silent)
			if !errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	s := daemonTransport(t)
	seededRepo(t, s.root, "seeded")
	tests := []struct {
		limits source.Limits
		want   string
	}{
		{source.Limits{MaxFiles: 1}, "limit exceeded: more than 1 files (the file-count limit)"},
		{source.Limits{MaxBytes: 8}, "limit exceeded: more than 8 bytes (the size limit)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			f := New(Options{Timeout: testTimeout, Limits: tt.limits})
			err := fetchErr(t, f, v1alpha1.GitSource{URL: s.url("seeded")}, nil)
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), `source "app"`) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
	t.Run("within limits", func(t *testing.T) {
		t.Parallel()
		f := New(Options{Timeout: testTimeout, Limits: source.Limits{MaxFiles: 2, MaxBytes: 13}})
		mustFetch(t, f, v1alpha1.GitSource{URL: s.url("seeded")}, nil)
	})
}

// TestCacheDir checks that a cache on disk outlives its Fetcher: a new
// Fetcher over the same directory polls without fetching, and fetches only
// what is new after a commit.
func TestCacheDir(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	repo := seededRepo(t, s.root, "seeded")
	dir := t.TempDir()
	src := v1alpha1.GitSource{URL: s.url("seeded"), Ref: v1alpha1.GitRef{Branch: "main"}}
	first := mustFetch(t, New(Options{CacheDir: dir, Timeout: testTimeout}), src, nil)

	f := New(Options{CacheDir: dir, Timeout: testTimeout})
	before := s.usage()
	again := mustFetch(t, f, src, nil)
	if got := s.usage().minus(before); got.listings != 1 || got.fetches != 0 {
		t.Errorf("polling through a new Fetcher cost %+v", got)
	}
	if again.Revision != first.Revision || again.Revision != "main@sha1:"+repo.hashes["c4"] {
		t.Errorf("revisions = %s, %s", first.Revision, again.Revision)
	}
	if !maps.EqualFunc(first.Files, again.Files, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Error("the snapshots differ")
	}

	repo.change("c5", map[string]string{"deploy/app.yaml": "v: 5\n"})
	repo.push()
	next := mustFetch(t, f, src, nil)
	if next.Revision != "main@sha1:"+repo.hashes["c5"] || string(next.Files["deploy/app.yaml"]) != "v: 5\n" {
		t.Errorf("after a commit: revision %s, deploy/app.yaml %q", next.Revision, next.Files["deploy/app.yaml"])
	}
}

// TestConcurrentFetches fetches one source from many goroutines: callers
// of one source with the same credentials join one fetch, and fetches of
// a URL take turns, so the server sees one fetch and fewer listings than
// callers.
func TestConcurrentFetches(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	repo := seededRepo(t, s.root, "seeded")
	f := New(Options{Timeout: testTimeout})
	src := v1alpha1.GitSource{URL: s.url("seeded"), Path: "deploy"}
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			snap, err := f.Fetch(context.Background(), "app", src, nil)
			if err == nil && snap.Revision != "HEAD@sha1:"+repo.hashes["c4"] {
				err = fmt.Errorf("revision %s", snap.Revision)
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := s.usage(); got.fetches != 1 || got.listings >= int64(cap(errs)) {
		t.Errorf("the server served %+v", got)
	}
}

// TestIncompleteCache checks that a cache missing objects, as a fetch cut
// short may leave it, is dropped and filled again.
func TestIncompleteCache(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	repo := seededRepo(t, s.root, "seeded")
	f := New(Options{Timeout: testTimeout})
	src := v1alpha1.GitSource{URL: s.url("seeded")}
	mustFetch(t, f, src, nil)

	r, err := parseRemote(src.URL)
	if err != nil {
		t.Fatal(err)
	}
	cr := f.repo(r.key)
	mem := cr.repo.Storer.(*memory.Storage)
	for h := range mem.Blobs {
		delete(mem.Blobs, h)
		delete(mem.Objects, h)
	}

	src.Path = "deploy" // not in the snapshot cache: the tree is read
	snap := mustFetch(t, f, src, nil)
	if snap.Revision != "HEAD@sha1:"+repo.hashes["c4"] || string(snap.Files["app.yaml"]) != "v: 4\n" {
		t.Errorf("revision %s, app.yaml %q", snap.Revision, snap.Files["app.yaml"])
	}
	if got := s.usage(); got.fetches != 2 {
		t.Errorf("the server served %+v, want a second fetch", got)
	}
}
