package ui

import (
	"fmt"
	"testing"
	"time"
)

// TestCommitLink: a git URL of GitHub, GitLab, Codeberg or Bitbucket (https,
// ssh, scp-like, with or without .git) links to the commit's page; another
// host, or a URL that is not one, links nowhere.
func TestCommitLink(t *testing.T) {
	const c = "4f2c0a1b2c3d4e5f60718293a4b5c6d7e8f90123"
	for url, want := range map[string]string{
		"https://github.com/acme/apps.git":         "https://github.com/acme/apps/commit/" + c,
		"https://github.com/acme/apps":             "https://github.com/acme/apps/commit/" + c,
		"git@github.com:acme/apps.git":             "https://github.com/acme/apps/commit/" + c,
		"ssh://git@github.com/acme/apps.git":       "https://github.com/acme/apps/commit/" + c,
		"https://gitlab.com/group/sub/apps.git":    "https://gitlab.com/group/sub/apps/-/commit/" + c,
		"https://codeberg.org/acme/apps":           "https://codeberg.org/acme/apps/commit/" + c,
		"https://bitbucket.org/acme/apps.git":      "https://bitbucket.org/acme/apps/commits/" + c,
		"https://git.example.com/acme/apps.git":    "",
		"javascript:alert(1)":                      "",
		"":                                         "",
		"https://github.com/":                      "",
		"https://github.com/acme/../../evil/x.git": "",
	} {
		if got := commitLink(url, c); got != want {
			t.Errorf("commitLink(%q) = %q, want %q", url, got, want)
		}
	}
}

// TestLoopbackHost: only addresses and localhost names pass the Host check.
func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:8090": true, "localhost:8090": true, "LOCALHOST": true, "[::1]:8090": true, "10.0.0.5:80": true,
		"app.localhost:1": true, "evil.example:8090": false, "127.0.0.1.nip.io:8090": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestStreamCountBounds: streams are bounded per user and overall, and a
// released stream frees its place.
func TestStreamCountBounds(t *testing.T) {
	var c streamCount
	for i := range maxStreamsPerUser {
		if !c.acquire("alice", maxStreamsPerUser) {
			t.Fatalf("stream %d of alice refused", i)
		}
	}
	if c.acquire("alice", maxStreamsPerUser) {
		t.Errorf("alice got more than %d streams", maxStreamsPerUser)
	}
	if !c.acquire("bob", maxStreamsPerUser) {
		t.Errorf("bob refused for alice's streams")
	}
	c.release("alice")
	if !c.acquire("alice", maxStreamsPerUser) {
		t.Errorf("a released stream did not free a place")
	}
	var all streamCount
	for i := range maxStreams {
		if !all.acquire("local", 0) {
			t.Fatalf("stream %d of the local user refused", i)
		}
	}
	if all.acquire("local", 0) {
		t.Errorf("more than %d streams", maxStreams)
	}
}

// TestCachesAreBounded: the TTL caches, the LRU of clients and the
// sessions hold at most their bound, and forget what expired.
func TestCachesAreBounded(t *testing.T) {
	tc := newTTLCache[int](10)
	for i := range 100 {
		tc.put(fmt.Sprint(i), i, time.Minute)
	}
	if len(tc.m) > 10 {
		t.Errorf("the TTL cache holds %d, bound 10", len(tc.m))
	}
	tc.put("old", 1, -time.Second)
	if _, ok := tc.get("old"); ok {
		t.Errorf("an expired entry was found")
	}

	l := newLRU[int](3)
	for i := range 5 {
		l.put(fmt.Sprint(i), i)
		if i == 2 {
			l.get("0") // 0 used last: 1 and 2 go first
		}
	}
	for k, want := range map[string]bool{"0": true, "1": false, "2": false, "3": true, "4": true} {
		if _, ok := l.get(k); ok != want {
			t.Errorf("LRU has %s: %v, want %v", k, ok, want)
		}
	}

	s := newSessions()
	ids := map[string]bool{}
	for range maxSessions + 5 {
		id, err := s.create("token")
		if err != nil {
			t.Fatal(err)
		}
		if ids[id] || len(id) != 64 {
			t.Fatalf("session id %q repeated or short", id)
		}
		ids[id] = true
	}
	if len(s.m) > maxSessions {
		t.Errorf("%d sessions, bound %d", len(s.m), maxSessions)
	}
}
