package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/sops/sopstest"
)

// spec.decryption, end to end through the real git provider and the
// loopback git server: an age-encrypted Secret manifest in the repository
// is applied decrypted, with the keys of a Secret read as the
// ManifestSync's service account. A value of an encrypted dotenv file that
// a script error quotes is masked. A wrong key, a changed (tampered) file
// and keys the account may not read each fail the source, naming the file
// or the Secret, and nothing is applied; a ManifestSync whose keys stop
// opening its files keeps what it applied. The age keys and the plain
// values are in no log line, event, status (its history included) or
// error of the run.
//
// What a hostile user gets: a repository changed after it was encrypted
// fails to decrypt (the MAC); a tenant names a keys Secret its account
// may not read and is refused, as for any Secret.
func TestSOPSDecryption(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	gitOperator(t, git.Options{})
	c := remoteEnv.Client
	home := remoteEnv.Namespace(t, nil)

	const (
		password = "pw-7Hq2-unguessable"
		apiToken = "tok-93mX-never-shown"
	)
	id, wrong := sopstest.NewIdentity(t), sopstest.NewIdentity(t)
	leaks := []string{password, base64.StdEncoding.EncodeToString([]byte(password)), apiToken, id.Secret, wrong.Secret, "AGE-SECRET-KEY-1"}

	secretYAML := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: " + password + "\n"
	enc := sopstest.EncryptRegex(t, "secret.yaml", []byte(secretYAML), "^(data|stringData)$", id.Recipient)
	dotenv := sopstest.Encrypt(t, "app.env", []byte("TOKEN="+apiToken+"\n"), id.Recipient)
	plainCM := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {k: v}\n")
	// The tampered copy: a plain field (encrypted_regex leaves the name
	// plain) changed after encryption, which the MAC covers.
	tampered := bytes.Replace(enc, []byte("name: db"), []byte("name: dc"), 1)
	if bytes.Equal(tampered, enc) {
		t.Fatalf("nothing tampered:\n%s", enc)
	}

	root := t.TempDir()
	publish := func(repo string, files map[string][]byte) string {
		t.Helper()
		dir := t.TempDir()
		for name, b := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		gittest.Publish(t, root, repo, dir)
		return repo
	}
	publish("good", map[string][]byte{"secret.yaml": enc, "cm.yaml": plainCM, "app.env": dotenv})
	publish("tampered", map[string][]byte{"secret.yaml": tampered, "cm.yaml": plainCM})
	// A kustomize overlay naming ../../base, whose Secret is encrypted:
	// the repository's tree is decrypted too; another environment's
	// file, encrypted for another key and not built, is left alone.
	publish("kust", map[string][]byte{
		"overlays/prod/kustomization.yaml": []byte("resources: [../../base]\nnamePrefix: prod-\n"),
		"base/kustomization.yaml":          []byte("resources: [secret.yaml]\n"),
		"base/secret.yaml":                 enc,
		"staging/secret.yaml":              sopstest.Encrypt(t, "secret.yaml", []byte("password: staging-only\n"), wrong.Recipient),
	})
	base := gittest.Daemon(t, root)

	for name, idn := range map[string]sopstest.Identity{"sops-age": id, "sops-wrong": wrong} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: name},
			Data: map[string][]byte{"identity.agekey": []byte("# created by age-keygen\n" + idn.Secret + "\n")}}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	sync := func(name, repo, keys, account string) (*v1alpha1.ManifestSync, string) {
		t.Helper()
		target := remoteEnv.Namespace(t, nil)
		repo, path, _ := strings.Cut(repo, ":")
		ms := newSync(home, name, v1alpha1.ManifestSyncSpec{
			Sources:            []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: base + "/" + repo + ".git", Path: path}}},
			Targets:            targets(target),
			Decryption:         &v1alpha1.Decryption{Provider: "sops", SecretRef: v1alpha1.LocalObjectReference{Name: keys}},
			ServiceAccountName: account,
		})
		remoteEnv.CreateSync(t, ms, timeout)
		return ms, target
	}
	wait := func(ms *v1alpha1.ManifestSync, reason string) string {
		t.Helper()
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), reason, timeout)
		msg := condition(got, v1alpha1.ConditionReady).Message
		t.Logf("%s: %s: %s", ms.Name, reason, msg)
		return msg
	}
	nothingApplied := func(ms *v1alpha1.ManifestSync, target string) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKey{Namespace: target, Name: "db"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: Secret %s/db: %v, want it not applied", ms.Name, target, err)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: target, Name: "plain"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: ConfigMap %s/plain: %v, want it not applied", ms.Name, target, err)
		}
	}

	// The keys open the file: the Secret is applied with the plain value.
	good, goodTarget := sync("good", "good", "sops-age", "")
	wait(good, v1alpha1.ReasonSynced)
	var applied corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: goodTarget, Name: "db"}, &applied); err != nil {
		t.Fatal(err)
	}
	if got := string(applied.Data["password"]); got != password {
		t.Errorf("the applied Secret's password is %q, want the decrypted value", got)
	}
	if _, ok := applied.Data["sops"]; ok || strings.Contains(string(applied.Data["password"]), "ENC[") {
		t.Error("the applied Secret holds sops data")
	}

	kust, kustTarget := sync("kust", "kust:overlays/prod", "sops-age", "")
	wait(kust, v1alpha1.ReasonSynced)
	if err := c.Get(ctx, client.ObjectKey{Namespace: kustTarget, Name: "prod-db"}, &applied); err != nil || string(applied.Data["password"]) != password {
		t.Errorf("the Secret kustomize built from ../../base: %v, %q", err, applied.Data["password"])
	}

	// A script error that quotes a decrypted value of a non-Secret file
	// (a dotenv a transform reads) shows it masked.
	eval, _ := sync("eval", "good", "sops-age", "")
	wait(eval, v1alpha1.ReasonSynced)
	updateRemote(t, eval, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = inline(`def main(ctx):
    token = ctx.sources["repo"].read("app.env").strip().split("=")[1]
    return int(token)
`)
	})
	if msg := wait(eval, v1alpha1.ReasonEvalFailed); !strings.Contains(msg, "***") {
		t.Errorf("EvalFailed %q: want the value quoted, masked", msg)
	}
	// good's and eval's resyncs decrypted the same commit with the same
	// keys: from the cache.
	if _, _, hits := decryptCache.Stats(); hits == 0 {
		t.Error("no decryption came from the cache")
	}

	// A wrong key: the source fails naming the file and the key group;
	// nothing is applied.
	wrongKey, wrongTarget := sync("wrong-key", "good", "sops-wrong", "")
	msg := wait(wrongKey, v1alpha1.ReasonSourceFailed)
	if !strings.Contains(msg, `source "repo"`) || !strings.Contains(msg, "repo/secret.yaml") && !strings.Contains(msg, "repo/app.env") || !strings.Contains(msg, id.Recipient) || !strings.Contains(msg, wrong.Recipient) {
		t.Errorf("wrong key: %q; want the source, the file, its recipient and the key given", msg)
	}
	nothingApplied(wrongKey, wrongTarget)

	// A file changed after it was encrypted fails its MAC.
	tamper, tamperTarget := sync("tampered", "tampered", "sops-age", "")
	msg = wait(tamper, v1alpha1.ReasonSourceFailed)
	if !strings.Contains(msg, `"repo/secret.yaml"`) || !strings.Contains(msg, "MAC mismatch") || !strings.Contains(msg, id.Recipient) {
		t.Errorf("tampered: %q; want the file, the MAC and its key group", msg)
	}
	nothingApplied(tamper, tamperTarget)

	// Keys the ManifestSync's account may not read: refused, as any Secret.
	nobody, nobodyTarget := sync("nobody", "good", "sops-age", "nobody")
	msg = wait(nobody, v1alpha1.ReasonSourceFailed)
	if !strings.Contains(msg, "spec.decryption: secretRef "+home+"/sops-age") || !strings.Contains(msg, "forbidden") {
		t.Errorf("keys the account may not read: %q", msg)
	}
	nothingApplied(nobody, nobodyTarget)

	// Keys that stop opening the files fail the source; what was applied
	// stays.
	updateRemote(t, good, func(ms *v1alpha1.ManifestSync) { ms.Spec.Decryption.SecretRef.Name = "sops-wrong" })
	wait(good, v1alpha1.ReasonSourceFailed)
	if err := c.Get(ctx, client.ObjectKey{Namespace: goodTarget, Name: "db"}, &applied); err != nil || string(applied.Data["password"]) != password {
		t.Errorf("the applied Secret after the source failed: %v", err)
	}

	// Nothing of the keys or the values anywhere.
	for _, ms := range []*v1alpha1.ManifestSync{good, kust, eval, wrongKey, tamper, nobody} {
		checkNoLeakRemote(t, ms, leaks)
	}
}

// updateRemote is updateSync on the second API server.
func updateRemote(t *testing.T, ms *v1alpha1.ManifestSync, change func(*v1alpha1.ManifestSync)) {
	t.Helper()
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		change(cur)
		if err := remoteEnv.Client.Update(context.Background(), cur); err != nil {
			return err
		}
		*ms = *cur
		return nil
	})
}

// checkNoLeakRemote is checkNoLeak on the second API server: none of
// leaks is in ms's status (its history too), the events of its namespace
// or the operator's logs.
func checkNoLeakRemote(t *testing.T, ms *v1alpha1.ManifestSync, leaks []string) {
	t.Helper()
	ctx := context.Background()
	got := &v1alpha1.ManifestSync{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	status, err := json.Marshal(got.Status)
	if err != nil {
		t.Fatal(err)
	}
	var events eventsv1.EventList
	if err := remoteEnv.Client.List(ctx, &events, client.InNamespace(ms.Namespace)); err != nil {
		t.Fatal(err)
	}
	var notes strings.Builder
	for _, e := range events.Items {
		notes.WriteString(e.Reason + ": " + e.Note + "\n")
	}
	if len(got.Status.History) == 0 && got.Name == "good" {
		t.Errorf("%s: no history to check", ms.Name)
	}
	for _, leak := range leaks {
		for where, text := range map[string]string{"status": string(status), "events": notes.String(), "logs": operatorLogs.String()} {
			if strings.Contains(text, leak) {
				t.Errorf("%s: %s shows %q", ms.Name, where, leak)
			}
		}
	}
}
