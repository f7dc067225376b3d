package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// TestEvalGitVerify: engine eval of a git source with verify reads the
// keys from the Secret file beside the sync file: a signed commit
// evaluates; an unsigned one pushed after it fails naming the commit and
// the Secret (and no key); without the Secret file it is a usage error,
// never an unverified read.
func TestEvalGitVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a git daemon")
	}
	content := gittest.TempDir(t)
	writeFiles(t, content, map[string]string{"README": "config\n"})
	root := gittest.TempDir(t)
	gittest.Publish(t, root, "config", content)
	url := gittest.Daemon(t, root) + "/config.git"
	t.Setenv("XDG_CACHE_HOME", gittest.TempDir(t))
	work := gittest.Clone(t, filepath.Join(root, "config.git"))
	key := gittest.NewSSHKey(t)
	work.Write(map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {MODE: signed}\n"})
	signed := work.Commit("signed", key)

	dir := gittest.TempDir(t)
	sync := filepath.Join(dir, "sync.yaml")
	writeFiles(t, dir, map[string]string{"sync.yaml": `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: config
    git:
      url: "` + url + `"
      ref: {branch: main}
      path: deploy
      verify: {mode: HEAD, secretRef: {name: git-keys}}
  targets:
  - name: dev
    namespace: dev
`})
	eval := func() (int, string, string) { return evalJSON(sync) }

	code, _, errOut := eval()
	if code != exitUsage || !strings.Contains(errOut, filepath.Join(dir, "git-keys.yaml")) {
		t.Fatalf("without the keys' Secret file: exit %d, %s", code, errOut)
	}

	writeFiles(t, dir, map[string]string{"git-keys.yaml": `apiVersion: v1
kind: Secret
metadata: {name: git-keys, namespace: platform}
stringData:
  author.pub: "` + key.Authorized + `"
`})
	code, out, errOut := eval()
	if code != 0 {
		t.Fatalf("signed commit: exit %d: %s", code, errOut)
	}
	if got := inputRevision(t, out, "config"); got != "main@sha1:"+signed || !strings.Contains(out, `"MODE": "signed"`) {
		t.Errorf("signed commit: revision %q, output:\n%s", got, out)
	}

	work.Write(map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {MODE: unsigned}\n"})
	unsigned := work.Commit("unsigned", nil)
	code, out, errOut = eval()
	if code != exitFailed || !strings.Contains(errOut, `source "config": commit `+unsigned) ||
		!strings.Contains(errOut, "Secret platform/git-keys") || !strings.Contains(errOut, "not signed") {
		t.Errorf("unsigned commit: exit %d, %s", code, errOut)
	}
	if strings.Contains(out, "unsigned") || strings.Contains(errOut, strings.Fields(key.Authorized)[1]) {
		t.Errorf("unsigned commit: its objects or the key in the output:\n%s\n%s", out, errOut)
	}
}
