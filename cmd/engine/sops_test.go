package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/sops/sopstest"
)

// sopsSync is a ManifestSync whose git source app is read from the local
// copy app/ beside it, with spec.decryption.
const sopsSync = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: db, namespace: ops}
spec:
  decryption:
    provider: sops
    secretRef: {name: sops-age}
  sources:
  - name: app
    git: {url: https://git.example.com/app.git, ref: {branch: main}}
  targets:
  - {name: prod, namespace: prod}
`

// sopsTree writes, in a new directory, sync.yaml, app/secret.yaml (a
// Secret whose stringData sops encrypted for id, with the password) and
// app/cm.yaml, and id's key file key.txt; it returns the directory.
func sopsTree(t *testing.T, id sopstest.Identity, password string) string {
	t.Helper()
	dir := t.TempDir()
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: " + password + "\n"
	files := map[string][]byte{
		"sync.yaml":       []byte(sopsSync),
		"app/secret.yaml": sopstest.EncryptRegex(t, "secret.yaml", []byte(secret), "^(data|stringData)$", id.Recipient),
		"app/cm.yaml":     []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {k: v}\n"),
		"key.txt":         []byte("# public key: " + id.Recipient + "\n" + id.Secret + "\n"),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runIn runs the engine in-process with args whose file names are
// relative to dir.
func runIn(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// engine eval and vet decrypt a sync file's SOPS files with the key file
// of --sops-age-key-file or SOPS_AGE_KEY_FILE (the flag wins); without
// either, spec.decryption is a usage error naming both. The decrypted
// value is masked as every Secret value is, and in no error; a wrong key
// names the file and the key group.
func TestSOPSEval(t *testing.T) {
	const password = "pw-cli-41Zq-unguessable"
	id, wrong := sopstest.NewIdentity(t), sopstest.NewIdentity(t)
	dir := sopsTree(t, id, password)
	if err := os.WriteFile(filepath.Join(dir, "wrong.txt"), []byte(wrong.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	leaks := []string{password, base64.StdEncoding.EncodeToString([]byte(password)), id.Secret, wrong.Secret}
	clean := func(what, out string) {
		t.Helper()
		for _, l := range leaks {
			if strings.Contains(out, l) {
				t.Errorf("%s shows %q:\n%s", what, l, out)
			}
		}
	}
	decrypted := func(what, stdout string) {
		t.Helper()
		if !strings.Contains(stdout, "kind: Secret") || !strings.Contains(stdout, "password: '***'") || strings.Contains(stdout, "ENC[") || strings.Contains(stdout, "sops:") {
			t.Errorf("%s: want the Secret decrypted, its value masked:\n%s", what, stdout)
		}
		clean(what, stdout)
	}

	t.Setenv(sopsKeyFileEnv, "")
	code, stdout, stderr := runIn(t, dir, "eval", "-f", "sync.yaml")
	if code != exitUsage || !strings.Contains(stderr, "--sops-age-key-file") || !strings.Contains(stderr, "SOPS_AGE_KEY_FILE") {
		t.Errorf("no key: exit %d, want %d naming the flag and the variable:\n%s", code, exitUsage, stderr)
	}
	clean("no key", stdout+stderr)

	code, stdout, stderr = runIn(t, dir, "eval", "-f", "sync.yaml", "--sops-age-key-file", "key.txt")
	if code != 0 {
		t.Fatalf("--sops-age-key-file: exit %d:\n%s", code, stderr)
	}
	decrypted("--sops-age-key-file", stdout)
	clean("stderr", stderr)

	// --show-secrets shows what was decrypted: the value itself.
	code, stdout, _ = runIn(t, dir, "eval", "-f", "sync.yaml", "--sops-age-key-file", "key.txt", "--show-secrets")
	if code != 0 || !strings.Contains(stdout, "password: "+password) {
		t.Errorf("--show-secrets: exit %d, want the decrypted value:\n%s", code, stdout)
	}

	t.Setenv(sopsKeyFileEnv, filepath.Join(dir, "key.txt"))
	code, stdout, stderr = runIn(t, dir, "eval", "-f", "sync.yaml")
	if code != 0 {
		t.Fatalf("SOPS_AGE_KEY_FILE: exit %d:\n%s", code, stderr)
	}
	decrypted("SOPS_AGE_KEY_FILE", stdout)

	// The flag wins over the variable.
	code, _, stderr = runIn(t, dir, "eval", "-f", "sync.yaml", "--sops-age-key-file", "wrong.txt")
	if code != exitFailed || !strings.Contains(stderr, `"app/secret.yaml"`) || !strings.Contains(stderr, id.Recipient) || !strings.Contains(stderr, wrong.Recipient) {
		t.Errorf("a wrong key (the flag's, over the variable's right one): exit %d, want %d naming the file and the recipients:\n%s", code, exitFailed, stderr)
	}
	clean("wrong key", stderr)

	// vet reads the sources as eval does, and needs the key as it does.
	code, _, stderr = runIn(t, dir, "vet", "sync.yaml")
	if code != 0 {
		t.Errorf("vet with SOPS_AGE_KEY_FILE: exit %d:\n%s", code, stderr)
	}
	t.Setenv(sopsKeyFileEnv, "")
	code, stdout, stderr = runIn(t, dir, "vet", "sync.yaml")
	if code != 2 || !strings.Contains(stdout+stderr, "--sops-age-key-file") {
		t.Errorf("vet without a key: exit %d, want 2 naming the flag:\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = runIn(t, dir, "vet", "sync.yaml", "--sops-age-key-file", "key.txt")
	if code != 0 {
		t.Errorf("vet --sops-age-key-file: exit %d:\n%s", code, stderr)
	}

	// A key file that is not one: named, not quoted.
	if err := os.WriteFile(filepath.Join(dir, "bad.txt"), []byte("AGE-SECRET-KEY-1NOTAKEY"+id.Secret[30:]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runIn(t, dir, "eval", "-f", "sync.yaml", "--sops-age-key-file", "bad.txt")
	if code != exitUsage || !strings.Contains(stderr, `"bad.txt": line 1`) || strings.Contains(stderr, id.Secret[30:]) {
		t.Errorf("a malformed key file: exit %d:\n%s", code, stderr)
	}
}

// engine diff --base decrypts both sides with the key, and shows a
// changed encrypted value masked, before and after, in every format.
func TestSOPSDiffBase(t *testing.T) {
	const before, after = "pw-before-8Kd1-unguessable", "pw-after-3Jf9-unguessable"
	id := sopstest.NewIdentity(t)
	dir := sopsTree(t, id, before)
	if err := os.Rename(filepath.Join(dir, "key.txt"), filepath.Join(t.TempDir(), "key.txt")); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "key.txt")
	if err := os.WriteFile(key, []byte(id.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "init", "-q")
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-q", "-m", "c1")
	next := sopsTree(t, id, after)
	b, err := os.ReadFile(filepath.Join(next, "app", "secret.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app", "secret.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sopsKeyFileEnv, "")
	leaks := []string{before, after, base64.StdEncoding.EncodeToString([]byte(before)), base64.StdEncoding.EncodeToString([]byte(after)), id.Secret}
	for _, format := range []string{"text", "markdown", "json"} {
		code, stdout, stderr := runIn(t, dir, "diff", "--base", "HEAD", "-o", format, "--sops-age-key-file", key)
		if code != 1 || !strings.Contains(stdout, "*** (before)") || !strings.Contains(stdout, "*** (after)") {
			t.Errorf("-o %s: exit %d, want 1 with the value changed, masked:\n%s%s", format, code, stdout, stderr)
		}
		for _, l := range leaks {
			if strings.Contains(stdout+stderr, l) {
				t.Errorf("-o %s shows %q:\n%s%s", format, l, stdout, stderr)
			}
		}
	}
	code, _, stderr := runIn(t, dir, "diff", "--base", "HEAD")
	if code != exitUsage || !strings.Contains(stderr, "SOPS_AGE_KEY_FILE") {
		t.Errorf("diff --base without a key: exit %d:\n%s", code, stderr)
	}
}

// engine diff against a cluster decrypts with the key as eval does: the
// Secret it would create shows, its decrypted values masked.
func TestSOPSDiffCluster(t *testing.T) {
	env := needCluster(t)
	const password = "pw-diff-2Wq7-unguessable"
	id := sopstest.NewIdentity(t)
	dir := sopsTree(t, id, password)
	ns := env.Namespace(t, nil)
	sync := strings.Replace(sopsSync, "{name: prod, namespace: prod}", "{name: prod, namespace: "+ns+"}", 1)
	if err := os.WriteFile(filepath.Join(dir, "sync.yaml"), []byte(sync), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sopsKeyFileEnv, "")
	code, stdout, stderr := diff(t, dir, "--sops-age-key-file", filepath.Join(dir, "key.txt"))
	if code != 1 || !strings.Contains(stdout, "Secret "+ns+"/db") || !strings.Contains(stdout, "password: '***") || strings.Contains(stdout, "ENC[") {
		t.Errorf("exit %d, want 1 with the Secret created, decrypted and masked:\n%s%s", code, stdout, stderr)
	}
	for _, l := range []string{password, base64.StdEncoding.EncodeToString([]byte(password)), id.Secret} {
		if strings.Contains(stdout+stderr, l) {
			t.Errorf("the output shows %q", l)
		}
	}
	code, _, stderr = diff(t, dir)
	if code != exitUsage || !strings.Contains(stderr, "--sops-age-key-file") {
		t.Errorf("no key: exit %d:\n%s", code, stderr)
	}
}
