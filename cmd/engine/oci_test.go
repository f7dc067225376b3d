package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/internal/registrytest"
)

// engine push then engine pull gives back the directory's files (but
// .git/ and what .sourceignore names), and the digest push prints is the
// one pull's revision carries; pull refuses a directory that is not
// empty without --force, and writes nothing through a link already in
// it (a user's own links cannot be used to write outside DIR).
func TestPushPullCommands(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{User: "ci", Password: "push-pw-4411"})
	dir := t.TempDir()
	for name, content := range map[string]string{"sync.yaml": "kind: ManifestSync\n", "deploy/app.yaml": "kind: Deployment\n", ".git/config": "x", "notes.tmp": "scratch", ".sourceignore": "*.tmp\n"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	creds := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte("ci:push-pw-4411"))
	if err := os.WriteFile(creds, []byte(`{"auths":{"`+reg.Addr+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	ref := "oci://" + reg.Addr + "/team/app:1.0.0"
	var out, errb bytes.Buffer
	if code := run([]string{"push", dir, ref, "--creds-file", creds, "--insecure", "--source", "https://git.example/app", "--revision", "main@sha1:abc"}, &out, &errb); code != 0 {
		t.Fatalf("push: exit %d: %s", code, errb.String())
	}
	digest := strings.TrimSpace(out.String())
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Fatalf("push printed %q", out.String())
	}
	dst := filepath.Join(t.TempDir(), "out")
	out.Reset()
	// DOCKER_CONFIG, the other way to give credentials.
	t.Setenv("DOCKER_CONFIG", filepath.Dir(creds))
	if code := run([]string{"pull", ref, "-o", dst, "--insecure"}, &out, &errb); code != 0 {
		t.Fatalf("pull: exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != "1.0.0@"+digest {
		t.Fatalf("pull printed %q, want 1.0.0@%s", got, digest)
	}
	var got []string
	_ = filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	if strings.Join(got, ",") != "deploy/app.yaml,sync.yaml" {
		t.Fatalf("pulled %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "deploy/app.yaml")); string(b) != "kind: Deployment\n" {
		t.Fatalf("deploy/app.yaml: %q", b)
	}

	// By digest, into the same directory: refused, then --force.
	errb.Reset()
	byDigest := "oci://" + reg.Addr + "/team/app@" + digest
	if code := run([]string{"pull", byDigest, "-o", dst, "--insecure"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "not empty") {
		t.Fatalf("pull into a non-empty directory: exit %d: %s", code, errb.String())
	}
	// A link in DIR pointing outside it is not written through.
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(dst, "deploy")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dst, "deploy")); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"pull", byDigest, "-o", dst, "--insecure", "--force"}, &out, &errb); code != exitFailed {
		t.Fatalf("pull --force through a link: exit %d: %s", code, errb.String())
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("pull wrote outside DIR: %v", entries)
	}
	if err := os.Remove(filepath.Join(dst, "deploy")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"pull", byDigest, "-o", dst, "--insecure", "--force"}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != digest {
		t.Fatalf("pull --force by digest: exit %d: %s %s", code, out.String(), errb.String())
	}

	// A wrong password: exit 1, naming the registry, not the password.
	if err := os.WriteFile(creds, []byte(`{"auths":{"`+reg.Addr+`":{"username":"ci","password":"bad-pw-0042"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code := run([]string{"pull", ref, "-o", t.TempDir(), "--insecure", "--creds-file", creds}, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), reg.Addr) || !strings.Contains(errb.String(), "unauthorized") || strings.Contains(errb.String(), "bad-pw") {
		t.Fatalf("wrong password: exit %d: %s", code, errb.String())
	}
	t.Logf("wrong password: %s", errb.String())
}
