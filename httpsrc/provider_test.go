package httpsrc

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
)

// secretsOf serves the Secrets of a test by name.
func secretsOf(m map[string]map[string][]byte) source.Secrets {
	return func(_ context.Context, ref v1alpha1.LocalObjectReference) (map[string][]byte, error) {
		data, ok := m[ref.Name]
		if !ok {
			return nil, errors.New("secretRef " + ref.Name + ": not found")
		}
		return data, nil
	}
}

// The provider reads the archive, its path as a subtree (the whole
// archive kept as the build's root); 100 polls of an unchanged archive are
// 100 conditional GETs answered 304, no body sent (counted at the
// server); a new pin downloads again.
func TestProviderPolls(t *testing.T) {
	body := tgzOf(t, reg("deploy/a.yaml", "a: 1\n"), reg("base/b.yaml", "b: 1\n"))
	s := newArchiveServer(t, body, true)
	c := NewCache(CacheOptions{})
	p := c.Provider(nil)
	src := v1alpha1.HTTPSource{URL: s.URL + "/config.tgz", Digest: digestOf(body), Insecure: true, Path: "deploy"}
	snap, err := p.FetchHTTP(ctxT(t), "cfg", src)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != digestOf(body) || string(snap.Files["a.yaml"]) != "a: 1\n" || len(snap.Files) != 1 || len(snap.Root) != 2 {
		t.Fatalf("first fetch: %s %v root %v", snap.Revision, snap.Files, snap.Root)
	}
	const polls = 100
	for range polls {
		got, err := p.FetchHTTP(ctxT(t), "cfg", src)
		if err != nil || got.Revision != snap.Revision || string(got.Files["a.yaml"]) != "a: 1\n" {
			t.Fatalf("poll: %v, %v", got, err)
		}
	}
	if r, b := s.requests.Load(), s.bodies.Load(); r != polls+1 || b != 1 {
		t.Fatalf("%d polls: the server saw %d requests and sent %d bodies; want %d and 1", polls, r, b, polls+1)
	}
	if downloads, unchanged, bytes, entries := c.Stats(); downloads != 1 || unchanged != polls || entries != 1 || bytes == 0 {
		t.Fatalf("stats: %d downloads, %d unchanged, %d bytes in %d entries", downloads, unchanged, bytes, entries)
	}

	// A new archive and its pin.
	next := tgzOf(t, reg("deploy/a.yaml", "a: 2\n"))
	s.set(next, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	src.Digest = digestOf(next)
	if snap, err = p.FetchHTTP(ctxT(t), "cfg", src); err != nil || string(snap.Files["a.yaml"]) != "a: 2\n" {
		t.Fatalf("after a new pin: %v, %v", snap, err)
	}

	c.Keep([]v1alpha1.HTTPSource{src})
	if _, _, _, entries := c.Stats(); entries != 1 {
		t.Fatalf("after Keep of one source: %d entries held", entries)
	}
	c.Keep(nil)
	if _, _, bytes, entries := c.Stats(); entries != 0 || bytes != 0 {
		t.Fatalf("after Keep of none: %d entries, %d bytes held", entries, bytes)
	}
}

// What a server that serves other bytes than the pin, a path leaving the
// archive and an archive with ../ get: an error naming the source and the
// URL, and no snapshot; the last good archive is not served in their
// place.
func TestProviderRefuses(t *testing.T) {
	good := tgzOf(t, reg("a.yaml", "a: 1\n"))
	s := newArchiveServer(t, good, true)
	p := NewCache(CacheOptions{}).Provider(nil)
	src := v1alpha1.HTTPSource{URL: s.URL + "/config.tgz", Digest: digestOf(good), Insecure: true}
	if _, err := p.FetchHTTP(ctxT(t), "cfg", src); err != nil {
		t.Fatal(err)
	}
	evil := tgzOf(t, reg("a.yaml", "a: evil\n"))
	s.set(evil, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	snap, err := p.FetchHTTP(ctxT(t), "cfg", src)
	if !errors.Is(err, ErrRefused) || snap != nil || !strings.Contains(err.Error(), "digest mismatch") || !strings.Contains(err.Error(), `source "cfg"`) || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("other bytes than the pin: %v, %v", snap, err)
	}
	t.Logf("%v", err)
	for _, path := range []string{"../x", "/etc"} {
		src := src
		src.Path = path
		if _, err := p.FetchHTTP(ctxT(t), "cfg", src); err == nil || !strings.Contains(err.Error(), `source "cfg"`) {
			t.Fatalf("path %q: %v", path, err)
		}
	}
	hostile := tgzOf(t, reg("../../x.yaml", "x"))
	s.set(hostile, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	_, err = p.FetchHTTP(ctxT(t), "cfg", v1alpha1.HTTPSource{URL: s.URL + "/config.tgz", Digest: digestOf(hostile), Insecure: true})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `"../../x.yaml"`) {
		t.Fatalf("a tar with ../: %v", err)
	}
}

// Credentials come from the Secret secretRef names: username and
// password, or bearerToken (token too); a Secret that cannot be read fails
// the source naming it; the credentials are in no error.
func TestProviderCredentials(t *testing.T) {
	body := tgzOf(t, reg("a.yaml", "a: 1\n"))
	s := newArchiveServer(t, body, true)
	p := NewCache(CacheOptions{}).Provider(secretsOf(map[string]map[string][]byte{
		"basic":  {"username": []byte("robot"), "password": []byte("pw-5512")},
		"bearer": {"bearerToken": []byte("tok-8812")},
		"token":  {"token": []byte("tok-9913")},
	}))
	for secret, want := range map[string]string{
		"basic":  "Basic " + base64.StdEncoding.EncodeToString([]byte("robot:pw-5512")),
		"bearer": "Bearer tok-8812",
		"token":  "Bearer tok-9913",
	} {
		src := v1alpha1.HTTPSource{URL: s.URL + "/config.tgz", Digest: digestOf(body), Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: secret}}
		if _, err := p.FetchHTTP(ctxT(t), "cfg", src); err != nil {
			t.Fatal(err)
		}
		if got := s.auth.Load(); got != want {
			t.Fatalf("secret %s: sent %q", secret, got)
		}
	}
	_, err := p.FetchHTTP(ctxT(t), "cfg", v1alpha1.HTTPSource{URL: s.URL + "/config.tgz", Digest: digestOf(body), Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "absent"}})
	if err == nil || !strings.Contains(err.Error(), "secretRef absent") {
		t.Fatalf("a missing Secret: %v", err)
	}
	// A URL's userinfo is no way to show a password in an error.
	_, err = p.FetchHTTP(ctxT(t), "cfg", v1alpha1.HTTPSource{URL: strings.Replace(s.URL, "http://", "http://u:pw-7734@", 1) + "/config.tgz", Digest: digestOf(tgzOf(t, reg("b", "b"))), Insecure: true})
	if err == nil || strings.Contains(err.Error(), "pw-7734") {
		t.Fatalf("userinfo in the URL: %v", err)
	}
}
