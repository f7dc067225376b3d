package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// The operator's git provider fetches with the credentials of the Secret
// a source's secretRef names, in the ManifestSync's namespace.
func TestGitProvider(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	content := t.TempDir()
	if err := os.MkdirAll(filepath.Join(content, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(content, "deploy", "cm.yaml"), []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	hash := gittest.Publish(t, root, "config", content)
	url := gittest.Daemon(t, root) + "/config.git"

	ns := env.Namespace(t, nil)
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	src := v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}, Path: "deploy"}
	g := NewGitProvider(t.TempDir())(reconciler.gitCredentials(ms), nil)

	snap, err := g.FetchGit(ctx, "config", src)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "main@sha1:"+hash || string(snap.Files["cm.yaml"]) != "kind: ConfigMap\n" || len(snap.Files) != 1 {
		t.Errorf("snapshot %s with %d files", snap.Revision, len(snap.Files))
	}

	// Credentials come from the Secret the secretRef names, in the
	// ManifestSync's namespace; a missing one fails the source.
	src.SecretRef = &v1alpha1.LocalObjectReference{Name: "git-auth"}
	_, err = g.FetchGit(ctx, "config", src)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `source "config": secretRef `+ns+"/git-auth") {
		t.Errorf("missing secret: %v", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: ns},
		Data:       map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret-pw")},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// With the Secret there, its credentials go with the fetch (git://
	// has no use for them, but they are read without error).
	if _, err := g.FetchGit(ctx, "config", src); err != nil {
		t.Errorf("with the secret: %v", err)
	}
}
