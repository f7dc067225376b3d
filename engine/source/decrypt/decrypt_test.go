package decrypt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/sops"
	"github.com/manifestsync/manifestsync/sops/sopstest"
)

const (
	password = "hunter2-correct-horse"
	token    = "tok_9f8e7d6c5b4a"
)

const secretYAML = `apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: ` + password + `
`

func keysOf(t testing.TB, ids ...sopstest.Identity) sops.Keys {
	t.Helper()
	entries := map[string][]byte{}
	for i, id := range ids {
		entries[fmt.Sprintf("k%d.agekey", i)] = []byte(id.Secret + "\n")
	}
	ks, err := sops.ParseKeys(entries)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// clone is a deep copy of what the decrypter may not change.
func clone(s *engine.Snapshot) *engine.Snapshot {
	c := *s
	c.Files = maps.Clone(s.Files)
	c.Root = maps.Clone(s.Root)
	for p, b := range c.Files {
		c.Files[p] = bytes.Clone(b)
	}
	for p, b := range c.Root {
		c.Root[p] = bytes.Clone(b)
	}
	c.Decrypted = slices.Clone(s.Decrypted)
	return &c
}

func sameSnapshot(t *testing.T, got, want *engine.Snapshot) {
	t.Helper()
	if got.Revision != want.Revision || !maps.EqualFunc(got.Files, want.Files, bytes.Equal) || !maps.EqualFunc(got.Root, want.Root, bytes.Equal) || !slices.Equal(got.Decrypted, want.Decrypted) {
		t.Fatal("the snapshot given was modified")
	}
}

// The files of the source's path and of the repository's tree decrypt to
// a new snapshot; the one given (shared by caches) is left as it was; a
// file of the repository for other keys is left encrypted.
func TestSOPS(t *testing.T) {
	id, other := sopstest.NewIdentity(t), sopstest.NewIdentity(t)
	secret := sopstest.Encrypt(t, "secret.yaml", []byte(secretYAML), id.Recipient)
	env := sopstest.Encrypt(t, "app.env", []byte("TOKEN="+token+"\n"), id.Recipient)
	base := sopstest.Encrypt(t, "base/creds.yaml", []byte("user: admin\n"), id.Recipient)
	prod := sopstest.Encrypt(t, "prod/secret.yaml", []byte("password: prod-only-value\n"), other.Recipient)
	notes := []byte("# we encrypt with sops; see the mac of each file\n")
	snap := &engine.Snapshot{
		Revision:  "main@sha1:0123",
		Files:     map[string][]byte{"secret.yaml": secret, "app.env": env, "notes.md": notes, "plain.yaml": []byte("a: b\n")},
		Decrypted: []string{"already-known"},
	}
	snap.Root = map[string][]byte{"apps/dev/secret.yaml": snap.Files["secret.yaml"], "apps/dev/app.env": env, "apps/dev/notes.md": notes,
		"apps/dev/plain.yaml": snap.Files["plain.yaml"], "base/creds.yaml": base, "prod/secret.yaml": prod}
	before := clone(snap)

	cache := NewCache(0)
	out, err := SOPS(keysOf(t, id), cache)(context.Background(), "app", snap)
	if err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, snap, before)
	if out == snap || out.Revision != snap.Revision {
		t.Fatalf("want a new snapshot at the same revision, got %p (%s)", out, out.Revision)
	}
	for _, files := range []map[string][]byte{out.Files, out.Root} {
		for p, b := range files {
			if strings.HasSuffix(p, "prod/secret.yaml") {
				if !bytes.Equal(b, prod) {
					t.Errorf("%s, for other keys, was changed", p)
				}
				continue
			}
			if bytes.Contains(b, []byte("ENC[")) || bytes.Contains(b, []byte("sops:")) || bytes.Contains(b, []byte("sops_")) {
				t.Errorf("%s is still encrypted:\n%s", p, b)
			}
		}
	}
	if !bytes.Contains(out.Files["secret.yaml"], []byte("password: "+password)) || !bytes.Contains(out.Root["apps/dev/app.env"], []byte("TOKEN="+token)) || !bytes.Contains(out.Root["base/creds.yaml"], []byte("user: admin")) {
		t.Errorf("plaintext missing:\n%s\n%s", out.Files["secret.yaml"], out.Root["apps/dev/app.env"])
	}
	if !bytes.Equal(out.Files["notes.md"], notes) {
		t.Error("a plain file that says sops was changed")
	}
	for _, v := range []string{password, token, "admin", "already-known"} {
		if !slices.Contains(out.Decrypted, v) {
			t.Errorf("Decrypted = %q lacks %q", out.Decrypted, v)
		}
	}
	// The snapshot's redactor masks them.
	red := engine.SnapshotRedactor(map[string]*engine.Snapshot{"app": out})
	if got := red.String("password " + password + " token " + token); strings.Contains(got, password) || strings.Contains(got, token) {
		t.Errorf("not masked: %s", got)
	}

	// Again, through the cache: nothing decrypted, the same result.
	_, _, hits := cache.Stats()
	again, err := SOPS(keysOf(t, id), cache)(context.Background(), "app", snap)
	if err != nil {
		t.Fatal(err)
	}
	_, _, hits2 := cache.Stats()
	if hits2-hits < 4 { // secret.yaml, app.env, base/creds.yaml, notes.md (Files and Root: the run's memo)
		t.Errorf("cache hits %d, want 4", hits2-hits)
	}
	if !maps.EqualFunc(again.Files, out.Files, bytes.Equal) || !maps.EqualFunc(again.Root, out.Root, bytes.Equal) || !slices.Equal(again.Decrypted, out.Decrypted) {
		t.Error("the cached decryption differs")
	}

	// Other keys, the same cache: the plaintext the first keys decrypted
	// is not theirs.
	_, err = SOPS(keysOf(t, other), cache)(context.Background(), "app", snap)
	if !errors.Is(err, sops.ErrNoKey) || !strings.Contains(err.Error(), `"app/secret.yaml"`) && !strings.Contains(err.Error(), `app.env`) {
		t.Fatalf("other keys: err = %v, want the file no key opens", err)
	}
	// Both keys: the prod file too.
	both, err := SOPS(keysOf(t, id, other), cache)(context.Background(), "app", snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(both.Root["prod/secret.yaml"], []byte("prod-only-value")) {
		t.Errorf("prod/secret.yaml not decrypted with its key:\n%s", both.Root["prod/secret.yaml"])
	}
}

// A wrong key and a changed file fail the source naming the file and the
// key group by its recipients, never a value or the key; in Root too,
// when the keys open the file.
func TestSOPSFailures(t *testing.T) {
	id, wrong := sopstest.NewIdentity(t), sopstest.NewIdentity(t)
	secret := sopstest.Encrypt(t, "secret.yaml", []byte(secretYAML), id.Recipient)
	tampered := bytes.Replace(secret, []byte("kind: ENC["), []byte("kind: ENC[X"), 1)
	if bytes.Equal(tampered, secret) {
		tampered = bytes.Replace(secret, []byte("name: ENC[AES256_GCM,data:"), []byte("name: ENC[AES256_GCM,data:A"), 1)
	}
	if bytes.Equal(tampered, secret) {
		t.Fatalf("no tampering:\n%s", secret)
	}
	for _, c := range []struct {
		what string
		snap *engine.Snapshot
		keys sops.Keys
		file string
		want string
	}{
		{"wrong key", &engine.Snapshot{Files: map[string][]byte{"secret.yaml": secret}}, keysOf(t, wrong), "app/secret.yaml", "no age key given opens key group 1 (age recipients " + id.Recipient + ")"},
		{"tampered", &engine.Snapshot{Files: map[string][]byte{"secret.yaml": tampered}}, keysOf(t, id), "app/secret.yaml", id.Recipient},
		{"tampered in the repository", &engine.Snapshot{Files: map[string][]byte{"a.yaml": []byte("a: b\n")}, Root: map[string][]byte{"base/secret.yaml": tampered}}, keysOf(t, id), "base/secret.yaml", id.Recipient},
		{"local copy", &engine.Snapshot{Origin: "/tmp/repo/app", Files: map[string][]byte{"secret.yaml": secret}}, keysOf(t, wrong), "/tmp/repo/app/secret.yaml", id.Recipient},
	} {
		t.Run(c.what, func(t *testing.T) {
			out, err := SOPS(c.keys, NewCache(0))(context.Background(), "app", c.snap)
			if err == nil || out != nil {
				t.Fatalf("no error (%v)", out)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `source "app": `) || !strings.Contains(msg, c.file) || !strings.Contains(msg, c.want) {
				t.Errorf("error = %s\nwant it to name the source, %s and %q", msg, c.file, c.want)
			}
			for _, s := range []string{password, id.Secret, wrong.Secret, "AGE-SECRET-KEY", "ENC["} {
				if strings.Contains(msg, s) {
					t.Errorf("error says %q: %s", s, msg)
				}
			}
		})
	}
}

// A context ended stops it.
func TestSOPSContext(t *testing.T) {
	id := sopstest.NewIdentity(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	snap := &engine.Snapshot{Files: map[string][]byte{"s.yaml": sopstest.Encrypt(t, "s.yaml", []byte("a: b\n"), id.Recipient)}}
	if _, err := SOPS(keysOf(t, id), nil)(ctx, "app", snap); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// The cache holds at most its bytes.
func TestCacheBound(t *testing.T) {
	c := NewCache(1000)
	for i := range 100 {
		c.put([32]byte{byte(i)}, entry{plain: make([]byte, 100)})
	}
	n, size, _ := c.Stats()
	if size > 1000 || n == 0 || n > 10 {
		t.Fatalf("%d entries, %d bytes", n, size)
	}
	if _, ok := c.get([32]byte{99}); !ok {
		t.Error("the last entry is gone")
	}
	if _, ok := c.get([32]byte{0}); ok {
		t.Error("the first entry is kept")
	}
}

// benchSnapshot is a repository of n plain files and enc encrypted ones,
// with Root as a git source of a kustomization path has it.
func benchSnapshot(b *testing.B, n, enc int) (*engine.Snapshot, sops.Keys) {
	id := sopstest.NewIdentity(b)
	files := map[string][]byte{}
	for i := range n {
		files[fmt.Sprintf("apps/cm-%d.yaml", i)] = fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%d\ndata:\n  key: %s\n", i, strings.Repeat("x", 1000))
	}
	for i := range enc {
		files[fmt.Sprintf("apps/secret-%d.yaml", i)] = sopstest.Encrypt(b, "s.yaml", []byte(secretYAML), id.Recipient)
	}
	return &engine.Snapshot{Revision: "r", Files: files, Root: files}, keysOf(b, id)
}

// BenchmarkSOPS is a resync of an unchanged source of 2000 files, 5 of
// them encrypted: without the cache every resync decrypts them again.
func BenchmarkSOPS(b *testing.B) {
	for _, cached := range []bool{false, true} {
		b.Run(fmt.Sprintf("cache=%v", cached), func(b *testing.B) {
			snap, keys := benchSnapshot(b, 2000, 5)
			var cache *Cache
			if cached {
				cache = NewCache(0)
			}
			f := SOPS(keys, cache)
			for b.Loop() {
				if _, err := f(context.Background(), "app", snap); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// At most sops.MaxFiles distinct encrypted files are decrypted: one in
// both Files and Root counts once (as does one content under two names:
// it is decrypted once).
func TestSOPSMaxFiles(t *testing.T) {
	id := sopstest.NewIdentity(t)
	files := map[string][]byte{}
	for i := range 600 {
		files[fmt.Sprintf("s%d.yaml", i)] = sopstest.Encrypt(t, "s.yaml", fmt.Appendf(nil, "a: %d\n", i), id.Recipient)
	}
	snap := &engine.Snapshot{Files: files, Root: files}
	if _, err := SOPS(keysOf(t, id), nil)(context.Background(), "app", snap); err != nil {
		t.Fatalf("600 files in Files and Root: %v", err)
	}
	for i := 600; i <= sops.MaxFiles; i++ {
		files[fmt.Sprintf("s%d.yaml", i)] = sopstest.Encrypt(t, "s.yaml", fmt.Appendf(nil, "a: %d\n", i), id.Recipient)
	}
	if _, err := SOPS(keysOf(t, id), nil)(context.Background(), "app", snap); err == nil || !strings.Contains(err.Error(), "more than 1000 encrypted files") {
		t.Fatalf("%d files: err = %v", len(files), err)
	}
}
