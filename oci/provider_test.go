package oci_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
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

// The provider reads an artifact at TAG@DIGEST, its path as a subtree (the
// whole artifact kept as the build's root); 100 polls of an unchanged tag
// through it are 100 manifest HEADs and no blob, counted from the
// registry's own access log; a new tag within a semver range is read at
// the next poll.
func TestProviderPolls(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	pushFiles(t, reg.Addr, "1.0.0", map[string][]byte{"deploy/a.yaml": []byte("a: 1\n"), "base/b.yaml": []byte("b: 1\n")})
	c := oci.NewCache(oci.CacheOptions{})
	p := c.Provider(nil)
	src := v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{SemVer: "^1"}, Insecure: true, Path: "deploy"}
	mark := len(reg.Log(t))
	snap, err := p.FetchOCI(ctx, "app", src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.Revision, "1.0.0@sha256:") || string(snap.Files["a.yaml"]) != "a: 1\n" || len(snap.Files) != 1 || len(snap.Root) != 2 {
		t.Fatalf("first fetch: %s %v root %v", snap.Revision, snap.Files, snap.Root)
	}
	if got := requests(t, reg, mark); got["GET blobs"] != 1 {
		t.Fatalf("first fetch: %v", got)
	}
	// A tag, so that a poll is one HEAD (a range lists the tags first).
	src.Ref = v1alpha1.OCIRef{Tag: "1.0.0"}
	if _, err := p.FetchOCI(ctx, "app", src); err != nil {
		t.Fatal(err)
	}
	mark = len(reg.Log(t))
	const polls = 100
	for range polls {
		s, err := p.FetchOCI(ctx, "app", src)
		if err != nil || s.Revision != snap.Revision || string(s.Files["a.yaml"]) != "a: 1\n" {
			t.Fatalf("poll: %v, %v", s, err)
		}
	}
	got := requests(t, reg, mark)
	t.Logf("%d unchanged polls through the provider, from the registry's log: %v", polls, got)
	if got["HEAD manifests"] != polls || got["GET manifests"] != 0 || got["GET blobs"] != 0 || len(got) != 1 {
		t.Fatalf("%d unchanged polls: %v; want one manifest HEAD each and nothing else", polls, got)
	}
	if downloads, unchanged, bytes, entries := c.Stats(); downloads != 2 || unchanged != polls || entries != 2 || bytes == 0 {
		t.Fatalf("stats: %d downloads, %d unchanged, %d bytes in %d entries", downloads, unchanged, bytes, entries)
	}

	// A new version within the range.
	pushFiles(t, reg.Addr, "1.1.0", map[string][]byte{"deploy/a.yaml": []byte("a: 2\n")})
	src.Ref = v1alpha1.OCIRef{SemVer: "^1"}
	snap, err = p.FetchOCI(ctx, "app", src)
	if err != nil || !strings.HasPrefix(snap.Revision, "1.1.0@sha256:") || string(snap.Files["a.yaml"]) != "a: 2\n" {
		t.Fatalf("after 1.1.0: %v, %v", snap, err)
	}

	// The sweep lets go of what no source reads.
	c.Keep([]v1alpha1.OCISource{src})
	if _, _, _, entries := c.Stats(); entries != 1 {
		t.Fatalf("after Keep of one source: %d entries held", entries)
	}
	c.Keep(nil)
	if _, _, bytes, entries := c.Stats(); entries != 0 || bytes != 0 {
		t.Fatalf("after Keep of none: %d entries, %d bytes held", entries, bytes)
	}
}

// What a source's path that leaves the artifact, a path with no files, and
// a tar with ../ get: an error naming the source and the artifact, and no
// snapshot.
func TestProviderRefusesEscapes(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{})
	pushFiles(t, reg.Addr, "1", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	p := oci.NewCache(oci.CacheOptions{}).Provider(nil)
	for _, path := range []string{"../etc", "/etc", "a/../../etc", "missing"} {
		snap, err := p.FetchOCI(ctx, "app", v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true, Path: path})
		if err == nil || snap != nil || !strings.Contains(err.Error(), `source "app"`) || !strings.Contains(err.Error(), reg.Addr) {
			t.Fatalf("path %q: %v, %v", path, snap, err)
		}
		t.Logf("path %q: %v", path, err)
	}
	writeImage(t, reg.Addr, "hostile:dotdot", fluxImage(t, tgz(t, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "../../x.yaml"}, body: "x"})))
	_, err := p.FetchOCI(ctx, "app", v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/hostile", Ref: v1alpha1.OCIRef{Tag: "dotdot"}, Insecure: true})
	if !errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), `"../../x.yaml"`) || !strings.Contains(err.Error(), `source "app"`) {
		t.Fatalf("a tar with ../: %v", err)
	}
}

// Credentials come from the .dockerconfigjson of the Secret secretRef
// names; a wrong password fails naming the source and the registry, never
// the password; a Secret without .dockerconfigjson says so.
func TestProviderCredentials(t *testing.T) {
	const user, password = "robot", "right-pw-3381"
	reg := registrytest.StartWith(t, registrytest.Config{User: user, Password: password})
	config := func(pw string) []byte {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
		return []byte(`{"auths":{"` + reg.Addr + `":{"auth":"` + auth + `"}}}`)
	}
	if _, err := oci.Push(ctx, &oci.Dir{Files: map[string][]byte{"a.yaml": []byte("a: 1\n")}}, "oci://"+reg.Addr+"/app:1", oci.PushOptions{Insecure: true, DockerConfigJSON: config(password)}); err != nil {
		t.Fatal(err)
	}
	p := oci.NewCache(oci.CacheOptions{}).Provider(secretsOf(map[string]map[string][]byte{
		"right": {oci.DockerConfigKey: config(password)},
		"wrong": {oci.DockerConfigKey: config("wrong-pw-1234")},
		"plain": {"username": []byte(user), "password": []byte(password)},
	}))
	src := func(secret string) v1alpha1.OCISource {
		return v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: secret}}
	}
	if snap, err := p.FetchOCI(ctx, "app", src("right")); err != nil || string(snap.Files["a.yaml"]) != "a: 1\n" {
		t.Fatalf("right password: %v", err)
	}
	_, err := p.FetchOCI(ctx, "app", src("wrong"))
	if !errors.Is(err, oci.ErrUnauthorized) || !strings.Contains(err.Error(), reg.Addr) || !strings.Contains(err.Error(), `source "app"`) ||
		strings.Contains(err.Error(), "wrong-pw") || strings.Contains(err.Error(), password) {
		t.Fatalf("wrong password: %v", err)
	}
	t.Logf("wrong password: %v", err)
	// The anonymous read of the same source is no way around it.
	if _, err := p.FetchOCI(ctx, "app", v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true}); !errors.Is(err, oci.ErrUnauthorized) {
		t.Fatalf("anonymous: %v", err)
	}
	if _, err := p.FetchOCI(ctx, "app", src("plain")); err == nil || !strings.Contains(err.Error(), ".dockerconfigjson") || strings.Contains(err.Error(), password) {
		t.Fatalf("a Secret without .dockerconfigjson: %v", err)
	}
	if _, err := p.FetchOCI(ctx, "app", src("absent")); err == nil || !strings.Contains(err.Error(), "secretRef absent") {
		t.Fatalf("a missing Secret: %v", err)
	}
}

// Verification sits between the digest and the files: a source with
// verify is refused when no Verifier is given; a Verifier that refuses
// gets a *source.VerifyError and no layer is downloaded; one that accepts
// is asked once per digest, not at every unchanged poll.
func TestProviderVerifyHook(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	digest := pushFiles(t, reg.Addr, "1", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	keys := map[string]map[string][]byte{"keys": {"cosign.pub": []byte("PEM")}}
	src := v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true,
		Verify: &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: "keys"}}}

	c := oci.NewCache(oci.CacheOptions{})
	_, err := c.Provider(secretsOf(keys)).FetchOCI(ctx, "app", src)
	if !errors.Is(err, oci.ErrVerifyUnavailable) || !strings.Contains(err.Error(), "verification is not available") {
		t.Fatalf("no verifier: %v", err)
	}

	var asked atomic.Int32
	refuse := true
	c.Verify = func(_ context.Context, got v1alpha1.OCISource, d string, k map[string][]byte, _ []byte) error {
		asked.Add(1)
		if d != digest || string(k["cosign.pub"]) != "PEM" || got.URL != src.URL {
			t.Errorf("verifier asked of %s with %v", d, k)
		}
		if refuse {
			return &source.VerifyError{What: "artifact " + got.URL + "@" + d, Keys: "Secret keys", Err: errors.New("unsigned")}
		}
		return nil
	}
	mark := len(reg.Log(t))
	_, err = c.Provider(secretsOf(keys)).FetchOCI(ctx, "app", src)
	ve, ok := errors.AsType[*source.VerifyError](err)
	if !ok || ve.Source != "app" {
		t.Fatalf("refused: %v", err)
	}
	if got := requests(t, reg, mark); got["GET blobs"] != 0 || got["GET manifests"] != 0 {
		t.Fatalf("an artifact whose verification failed was read: %v", got)
	}
	t.Logf("refused: %v", err)

	refuse = false
	for range 3 {
		snap, err := c.Provider(secretsOf(keys)).FetchOCI(ctx, "app", src)
		if err != nil || string(snap.Files["a.yaml"]) != "a: 1\n" || snap.Revision != "1@"+digest {
			t.Fatalf("verified: %v, %v", snap, err)
		}
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("the verifier was asked %d times; want twice (refused, then once for the three reads of one digest)", n)
	}
}

// A registry slower than Wait holds no caller: the first read gets a
// *source.PendingError whose Done closes when the fetch ends; a later
// read of a source read before gets its last snapshot, Pending set, while
// the new fetch goes on.
func TestProviderSlowRegistry(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{})
	pushFiles(t, reg.Addr, "1", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	target, _ := url.Parse("http://" + reg.Addr)
	var gate atomic.Pointer[chan struct{}] // requests wait for it to close; nil: none waits
	proxy := httputil.NewSingleHostReverseProxy(target)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ch := gate.Load(); ch != nil {
			select {
			case <-*ch:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	src := v1alpha1.OCISource{URL: "oci://" + l.Addr().String() + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true}
	p := oci.NewCache(oci.CacheOptions{Wait: 200 * time.Millisecond, Limits: oci.Limits{Timeout: 20 * time.Second}}).Provider(nil)

	release := make(chan struct{})
	gate.Store(&release)
	start := time.Now()
	_, err = p.FetchOCI(ctx, "app", src)
	pe, ok := errors.AsType[*source.PendingError](err)
	if !ok || time.Since(start) > 5*time.Second {
		t.Fatalf("first read of a slow registry: %v after %v", err, time.Since(start))
	}
	close(release)
	select {
	case <-pe.Done:
	case <-time.After(20 * time.Second):
		t.Fatal("the fetch in the background did not end")
	}
	gate.Store(nil)
	snap, err := p.FetchOCI(ctx, "app", src)
	if err != nil || snap.Pending != nil || string(snap.Files["a.yaml"]) != "a: 1\n" {
		t.Fatalf("after the fetch ended: %v, %v", snap, err)
	}

	release = make(chan struct{})
	gate.Store(&release)
	var stale *engine.Snapshot
	stale, err = p.FetchOCI(ctx, "app", src)
	if err != nil || stale.Pending == nil || stale.Revision != snap.Revision {
		t.Fatalf("a poll of a slow registry: %v, %v; want the last snapshot, pending", stale, err)
	}
	close(release)
	<-stale.Pending
}

// The last artifacts held are bounded in bytes: past the bound the least
// recently read is let go, and read again in full at its next poll.
func TestProviderBound(t *testing.T) {
	reg := registrytest.Start(t)
	for _, tag := range []string{"a", "b"} {
		pushFiles(t, reg, tag, map[string][]byte{"f.yaml": bytes.Repeat([]byte(tag), 1000)})
	}
	c := oci.NewCache(oci.CacheOptions{MaxBytes: 1500})
	p := c.Provider(nil)
	read := func(tag string) {
		t.Helper()
		snap, err := p.FetchOCI(ctx, "app", v1alpha1.OCISource{URL: "oci://" + reg + "/app", Ref: v1alpha1.OCIRef{Tag: tag}, Insecure: true})
		if err != nil || len(snap.Files["f.yaml"]) != 1000 {
			t.Fatalf("%s: %v", tag, err)
		}
	}
	read("a")
	read("a")
	read("b")
	if downloads, unchanged, bytes, entries := c.Stats(); downloads != 2 || unchanged != 1 || entries != 1 || bytes > 1500 {
		t.Fatalf("stats: %d downloads, %d unchanged, %d bytes in %d entries; want 2, 1, at most 1500 in 1", downloads, unchanged, bytes, entries)
	}
	read("a") // let go of: read in full again
	if downloads, _, _, _ := c.Stats(); downloads != 3 {
		t.Fatalf("%d downloads; want a read again", downloads)
	}
}
