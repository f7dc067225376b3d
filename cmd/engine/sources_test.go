package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// TestEvalGit evaluates a ManifestSync whose source is fetched from a git
// daemon on 127.0.0.1: as the spec says, and overridden by --source (of
// eval and of vet).
func TestEvalGit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a git daemon")
	}
	content := gittest.TempDir(t)
	writeFiles(t, content, map[string]string{
		"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {MODE: git}\n",
		"README.md":      "outside the path\n",
	})
	root := gittest.TempDir(t)
	hash := gittest.Publish(t, root, "config", content)
	url := gittest.Daemon(t, root) + "/config.git"
	t.Setenv("XDG_CACHE_HOME", gittest.TempDir(t))

	dir := gittest.TempDir(t)
	sync := filepath.Join(dir, "sync.yaml")
	writeFiles(t, dir, map[string]string{"sync.yaml": `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: config
    git: {url: "` + url + `", ref: {branch: main}, path: deploy}
  targets:
  - name: dev
    namespace: dev
`})
	eval := func(args ...string) (int, string, string) { return evalJSON(sync, args...) }
	revision := func(out string) string { t.Helper(); return inputRevision(t, out, "config") }

	// As the spec says, twice: the second run is served from the cache.
	for range 2 {
		code, out, errOut := eval()
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := revision(out); got != "main@sha1:"+hash {
			t.Errorf("revision %q, want main@sha1:%s", got, hash)
		}
		if !strings.Contains(out, `"MODE": "git"`) {
			t.Errorf("output lacks the fetched object:\n%s", out)
		}
	}
	// Pinned to the commit by --source URL@REF; the path stays.
	code, out, errOut := eval("--source", "config="+url+"@"+hash[:10])
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if got := revision(out); got != "sha1:"+hash {
		t.Errorf("pinned revision %q, want sha1:%s", got, hash)
	}
	// A ref the remote does not have fails the evaluation, naming it.
	code, _, errOut = eval("--source", "config="+url+"@tag:v9.9.9")
	if code != exitFailed || !strings.Contains(errOut, `source "config"`) || !strings.Contains(errOut, `tag "v9.9.9"`) {
		t.Errorf("missing tag: exit %d, %s", code, errOut)
	}
	// A URL for a source that is not a git source is a usage error.
	code, _, errOut = eval("--source", "nosuch="+url)
	if code != exitUsage || !strings.Contains(errOut, `no source named "nosuch"`) {
		t.Errorf("unknown source: exit %d, %s", code, errOut)
	}

	// vet takes --source URL@REF as eval does: the pinned commit checks,
	// a ref the remote does not have is an error naming it.
	vet := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"vet", dir}, args...), &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, out := vet("--source", "config="+url+"@"+hash[:10]); code != 0 {
		t.Errorf("vet pinned: exit %d, %s", code, out)
	}
	if code, out := vet("--source", "config="+url+"@tag:v9.9.9"); code != exitUsage || !strings.Contains(out, `sync.yaml:6: source "config"`) || !strings.Contains(out, `tag "v9.9.9"`) {
		t.Errorf("vet missing tag: exit %d, %s", code, out)
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
