package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci/cosigntest"
)

// engine eval verifies an oci source's verify as the operator does, with
// the keys of the Secret manifest beside the sync file: an artifact signed
// with a cosign key of it evaluates; an unsigned one fails naming the
// artifact by digest and the Secret, and prints no object; without the
// Secret's file the source fails too (never read unverified).
func TestEvalOCIVerify(t *testing.T) {
	reg := registrytest.Start(t)
	repo, err := name.NewRepository(reg+"/team/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	push := func(tag, value string) string {
		t.Helper()
		artifact := t.TempDir()
		writeFiles(t, artifact, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: \"" + value + "\"}\n"})
		var out, errb bytes.Buffer
		if code := run([]string{"push", artifact, "oci://" + reg + "/team/app:" + tag, "--insecure"}, &out, &errb); code != 0 {
			t.Fatalf("push: exit %d: %s", code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	key := cosigntest.NewKey(t)
	signed := push("signed", "signed")
	cosigntest.Write(t, repo, signed, cosigntest.SignDigest(t, key, repo.Digest(signed)))
	unsigned := push("unsigned", "unsigned")

	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", "")
	dir := t.TempDir()
	sync := filepath.Join(dir, "sync.yaml")
	syncFile := func(tag string) string {
		return `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: app
    oci: {url: "oci://` + reg + `/team/app", ref: {tag: ` + tag + `}, insecure: true, verify: {provider: cosign, secretRef: {name: cosign-keys}}}
  targets:
  - name: dev
    namespace: dev
`
	}
	pub := "    " + strings.ReplaceAll(strings.TrimSpace(string(key.Pub)), "\n", "\n    ")
	writeFiles(t, dir, map[string]string{
		"sync.yaml":        syncFile("signed"),
		"cosign-keys.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: cosign-keys}\nstringData:\n  cosign.pub: |\n" + pub + "\n",
	})
	code, out, errOut := evalJSON(sync)
	if code != 0 || !strings.Contains(out, `"v": "signed"`) || inputRevision(t, out, "app") != "signed@"+signed {
		t.Fatalf("signed: exit %d: %s\n%s", code, errOut, out)
	}

	writeFiles(t, dir, map[string]string{"sync.yaml": syncFile("unsigned")})
	code, out, errOut = evalJSON(sync)
	for _, want := range []string{`source "app"`, "artifact oci://" + reg + "/team/app@" + unsigned, "Secret platform/cosign-keys", "unsigned"} {
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("unsigned: exit %d, want an error saying %q: %s", code, want, errOut)
		}
	}
	if strings.Contains(out, `"v": "unsigned"`) {
		t.Errorf("unsigned: its object was printed:\n%s", out)
	}
	t.Logf("unsigned: %s", strings.TrimSpace(errOut))

	if err := os.Remove(filepath.Join(dir, "cosign-keys.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"sync.yaml": syncFile("signed")})
	if code, out, errOut := evalJSON(sync); code == 0 || !strings.Contains(errOut, "cosign-keys") || strings.Contains(out, `"v": "signed"`) {
		t.Errorf("no keys file: exit %d: %s\n%s", code, errOut, out)
	} else {
		t.Logf("no keys file: %s", strings.TrimSpace(errOut))
	}
}
