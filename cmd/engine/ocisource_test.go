package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/internal/registrytest"
)

// TestEvalOCIAndHTTP evaluates a sync file whose sources are an artifact
// `engine push` published to a registry on 127.0.0.1 (read with the
// .dockerconfigjson of the Secret beside the sync file) and an archive an
// http server on 127.0.0.1 serves, pinned by its digest: eval prints
// their objects and revisions; a second run downloads no archive (304);
// --source still wins over the registry; a wrong password fails naming
// the registry, never the password; a digest mismatch fails and prints no
// object; DOCKER_CONFIG is read for a source without secretRef.
func TestEvalOCIAndHTTP(t *testing.T) {
	const password = "eval-oci-pw-2207"
	reg := registrytest.StartWith(t, registrytest.Config{User: "ci", Password: password})
	dockerConfig := func(pw string) string {
		auth := base64.StdEncoding.EncodeToString([]byte("ci:" + pw))
		return `{"auths":{"` + reg.Addr + `":{"auth":"` + auth + `"}}}`
	}
	artifact := t.TempDir()
	writeFiles(t, artifact, map[string]string{
		"deploy/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: oci-\n",
		"deploy/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {from: registry}\n",
	})
	creds := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(creds, []byte(dockerConfig(password)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"push", artifact, "oci://" + reg.Addr + "/team/app:1.2.0", "--creds-file", creds, "--insecure"}, &out, &errb); code != 0 {
		t.Fatalf("push: exit %d: %s", code, errb.String())
	}
	digest := strings.TrimSpace(out.String())

	archive := tgzOf(t, map[string]string{"manifests/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: http-app}\ndata: {from: http}\n"})
	var requests, bodies atomic.Int64
	body := atomic.Pointer[[]byte]{}
	body.Store(&archive)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		b := *body.Load()
		w.Header().Set("ETag", `"`+digestOf(b)[7:23]+`"`)
		if r.Header.Get("If-None-Match") != w.Header().Get("ETag") {
			bodies.Add(1)
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	}))
	t.Cleanup(srv.Close)

	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", "")
	dir := t.TempDir()
	sync := filepath.Join(dir, "sync.yaml")
	syncFile := func(secretRef string) string {
		return `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: app
    oci: {url: "oci://` + reg.Addr + `/team/app", ref: {semver: "^1"}, insecure: true, path: deploy` + secretRef + `}
  - name: cfg
    http: {url: "` + srv.URL + `/config.tgz", digest: "` + digestOf(archive) + `", insecure: true}
  targets:
  - name: dev
    namespace: dev
`
	}
	regcreds := func(pw string) string {
		return "apiVersion: v1\nkind: Secret\nmetadata: {name: regcreds}\ntype: kubernetes.io/dockerconfigjson\nstringData:\n  .dockerconfigjson: '" + dockerConfig(pw) + "'\n"
	}
	writeFiles(t, dir, map[string]string{"sync.yaml": syncFile(", secretRef: {name: regcreds}"), "regcreds.yaml": regcreds(password)})
	for range 2 {
		code, out, errOut := evalJSON(sync)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if got := inputRevision(t, out, "app"); got != "1.2.0@"+digest {
			t.Errorf("oci revision %q, want 1.2.0@%s", got, digest)
		}
		if got := inputRevision(t, out, "cfg"); got != digestOf(archive) {
			t.Errorf("http revision %q, want %s", got, digestOf(archive))
		}
		if !strings.Contains(out, `"name": "oci-app"`) || !strings.Contains(out, `"from": "registry"`) || !strings.Contains(out, `"name": "http-app"`) {
			t.Errorf("output lacks the sources' objects:\n%s", out)
		}
		if strings.Contains(out+errOut, password) {
			t.Errorf("the password shows:\n%s\n%s", out, errOut)
		}
	}
	if r, b := requests.Load(), bodies.Load(); r != 2 || b != 1 {
		t.Errorf("two runs: the http server saw %d requests and sent %d bodies; want 2 and 1", r, b)
	}

	// --source wins over the registry.
	local := t.TempDir()
	writeFiles(t, local, map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: local}\n"})
	code, out2, errOut := evalJSON(sync, "--source", "app="+filepath.Join(local, "deploy"))
	if code != 0 || !strings.Contains(out2, `"name": "local"`) || strings.Contains(out2, `"name": "oci-app"`) {
		t.Errorf("--source: exit %d: %s\n%s", code, errOut, out2)
	}

	// A copy beside the sync file wins too, and eval says so.
	writeFiles(t, dir, map[string]string{"app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: beside}\n"})
	code, out2, errOut = evalJSON(sync)
	if code != 0 || !strings.Contains(out2, `"name": "beside"`) || !strings.HasPrefix(inputRevision(t, out2, "app"), "local:app@sha256:") ||
		!strings.Contains(errOut, `source "app": read from the local copy `+filepath.Join(dir, "app")+", not fetched from oci://"+reg.Addr+"/team/app") {
		t.Errorf("a copy beside the sync file: exit %d: %s\n%s", code, errOut, out2)
	}
	if err := os.RemoveAll(filepath.Join(dir, "app")); err != nil {
		t.Fatal(err)
	}

	// A wrong password.
	writeFiles(t, dir, map[string]string{"regcreds.yaml": regcreds("wrong-pw-3391")})
	code, _, errOut = evalJSON(sync)
	if code == 0 || !strings.Contains(errOut, "unauthorized") || !strings.Contains(errOut, reg.Addr) || strings.Contains(errOut, "pw-") {
		t.Errorf("wrong password: exit %d: %s", code, errOut)
	}
	t.Logf("wrong password: %s", strings.TrimSpace(errOut))

	// No secretRef: the user's DOCKER_CONFIG.
	dockerDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dockerDir, "config.json"), []byte(dockerConfig(password)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dockerDir)
	writeFiles(t, dir, map[string]string{"sync.yaml": syncFile("")})
	if code, out, errOut := evalJSON(sync); code != 0 || !strings.Contains(out, `"name": "oci-app"`) {
		t.Errorf("DOCKER_CONFIG: exit %d: %s", code, errOut)
	}

	// Other bytes than the pin: refused, no object printed.
	tampered := tgzOf(t, map[string]string{"manifests/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tampered}\n"})
	body.Store(&tampered)
	code, out3, errOut := evalJSON(sync)
	if code == 0 || !strings.Contains(errOut, "digest mismatch") || !strings.Contains(errOut, `source "cfg"`) || strings.Contains(out3, "tampered") {
		t.Errorf("digest mismatch: exit %d: %s\n%s", code, errOut, out3)
	}
	t.Logf("digest mismatch: %s", strings.TrimSpace(errOut))
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tgzOf is a tar+gzip of files.
func tgzOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for p, body := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(len(body)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprint(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
