package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/helm/helmtest"
)

// The operator's helm provider fetches with the credentials of the Secret
// a source's secretRef names, in the ManifestSync's namespace; a wrong
// password is "unauthorized" naming the repository, never the password.
func TestHelmProvider(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	repo := helmtest.NewRepo(t)
	archive := helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil))
	repo.Add("demo", "1.0.0", archive)
	repo.RequireAuth("robot", "chart-pw-1234")

	ns := env.Namespace(t, nil)
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	h := NewHelmCache(charts.Options{}).Provider(reconciler.helmCredentials(ms))
	src := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "charts"}}

	_, err := h.FetchHelm(ctx, "chart", src, nil)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `source "chart": secretRef `+ns+"/charts") {
		t.Fatalf("missing secret: %v", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: ns},
		Data:       map[string][]byte{"username": []byte("robot"), "password": []byte("wrong-pw-5678")},
	}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	_, err = h.FetchHelm(ctx, "chart", src, nil)
	if !errors.Is(err, charts.ErrUnauthorized) || strings.Contains(err.Error(), "pw-") || !strings.Contains(err.Error(), repo.URL) {
		t.Fatalf("wrong password: %v", err)
	}
	secret.Data["password"] = []byte("chart-pw-1234")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	snap, err := h.FetchHelm(ctx, "chart", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "demo@1.0.0@"+helmtest.Digest(archive) || string(snap.Files["Chart.yaml"]) == "" {
		t.Fatalf("snapshot %s: %d files", snap.Revision, len(snap.Files))
	}
}
