package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/sops/sopstest"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// The web UI's diff of a ManifestSync with spec.decryption decrypts its
// git source's SOPS files with the keys of its Secret read as the user:
// the Secret it would create shows, its value masked. A user who may not
// read the keys gets the API server's refusal naming spec.decryption and
// the Secret, not a diff; neither shows the value or the key.
func TestUIEvaluatorSOPS(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	const password = "pw-ui-5Rt8-unguessable"
	id := sopstest.NewIdentity(t)

	repo := t.TempDir()
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: " + password + "\n"
	if err := os.WriteFile(filepath.Join(repo, "secret.yaml"), sopstest.EncryptRegex(t, "secret.yaml", []byte(secret), "^(data|stringData)$", id.Recipient), 0o644); err != nil {
		t.Fatal(err)
	}
	root := gittest.TempDir(t)
	gittest.Publish(t, root, "app", repo)
	url := gittest.Daemon(t, root) + "/app.git"
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sops-age"},
		Data: map[string][]byte{"identity.agekey": []byte(id.Secret + "\n")}}); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources:    []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets:    []v1alpha1.Target{{Name: "dev", Namespace: ns}},
			Decryption: &v1alpha1.Decryption{Provider: "sops", SecretRef: v1alpha1.LocalObjectReference{Name: "sops-age"}},
		},
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	leaks := []string{password, base64.StdEncoding.EncodeToString([]byte(password)), id.Secret}

	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Object != "Secret "+ns+"/db" || !strings.Contains(diffs[0].Unified, "password: '***") || strings.Contains(diffs[0].Unified, "ENC[") {
		t.Errorf("diffs %+v: want the Secret created, decrypted, its value masked", diffs)
	}
	for _, l := range leaks {
		noValue(t, l, diffs, nil)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nobody, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	diffs, err = inspect.Diff(ctx, nobody, ms, ev, "")
	if err == nil || !strings.Contains(err.Error(), "spec.decryption: secretRef "+ns+"/sops-age") || !strings.Contains(err.Error(), `is forbidden: User "nobody"`) {
		t.Errorf("error %v: want spec.decryption's Secret refused to the user", err)
	}
	for _, l := range leaks {
		noValue(t, l, diffs, err)
	}
}
