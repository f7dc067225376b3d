package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/helm/helmtest"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

const uiSecretValue = "hunter2-uieval-secret"

// The web UI's evaluator reads a ManifestSync's sources as its spec says,
// as the user: a git source from a loopback git daemon, substituted from a
// ConfigMap and a Secret of the cluster read through the user's client;
// the diff shows the object it would create with the Secret's value
// masked. A user who may not read that Secret gets the API server's
// refusal naming the source; a spec that names an object of another
// namespace not shared with its own gets refused as the operator refuses
// it (a hostile spec cannot borrow another namespace's objects through
// the UI); and no Secret value is in any result or error.
func TestUIEvaluator(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	other := env.Namespace(t, nil)

	repo := t.TempDir()
	for name, content := range map[string]string{
		"kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: dev-\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata:\n  env: ${env}\n  password: ${password}\n",
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := gittest.TempDir(t)
	gittest.Publish(t, root, "app", repo)
	url := gittest.Daemon(t, root) + "/app.git"

	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"}, Data: map[string]string{"env": "staging"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"password": uiSecretValue}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "private"}, Data: map[string]string{"k": "v"}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"},
				Build: v1alpha1.Build{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "creds"}}}}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}},
		},
	}
	ev, stop, err := newUIEvaluator("ui")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Action != "Created" || diffs[0].Object != "ConfigMap "+ns+"/dev-settings" ||
		!strings.Contains(diffs[0].Unified, "+  env: staging") || !strings.Contains(diffs[0].Unified, "+  password: '***'") {
		t.Errorf("diffs %+v", diffs)
	}
	noSecret(t, diffs, nil)

	// A user who may not read the Secret.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nobody, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	_, err = inspect.Diff(ctx, nobody, ms, ev, "")
	if err == nil || !strings.Contains(err.Error(), `source "app"`) || !strings.Contains(err.Error(), `is forbidden: User "nobody"`) {
		t.Errorf("error %v: want the source named and the API server's refusal", err)
	}
	noSecret(t, nil, err)

	// An object of another namespace that does not share itself.
	hostile := ms.DeepCopy()
	hostile.Spec.Sources = append(hostile.Spec.Sources, v1alpha1.Source{Name: "borrowed",
		Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: other, Name: "private"}})
	_, err = inspect.Diff(ctx, env.Client, hostile, ev, "")
	if err == nil || !strings.Contains(err.Error(), `ConfigMap `+other+`/private: access refused`) {
		t.Errorf("error %v: want access refused", err)
	}
}

// noSecret fails t when uiSecretValue is in diffs or err.
func noSecret(t *testing.T, diffs []inspect.ObjectDiff, err error) {
	t.Helper()
	b, _ := json.Marshal(diffs)
	if err != nil {
		b = append(b, err.Error()...)
	}
	if strings.Contains(string(b), uiSecretValue) {
		t.Errorf("the Secret's value shows: %s", b)
	}
}

// A helm source: the chart fetched from a loopback chart repository with
// the credentials of its secretRef, read through the user's client; the
// diff shows the chart's object; the repository's password shows
// nowhere.
func TestUIEvaluatorHelm(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.2.0", helmtest.Package("demo", helmtest.Chart("demo", "1.2.0", map[string]string{"README.md": t.Name() + "\n"})))
	repo.RequireAuth("robot", "chart-pw-ui-1234")
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		StringData: map[string]string{"username": "robot", "password": "chart-pw-ui-1234"}}); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "chart", Helm: &v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL,
				Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "charts"}}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}},
		},
	}
	ev, stop, err := newUIEvaluator("ui")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Object != "ConfigMap "+ns+"/web-demo" || !strings.Contains(diffs[0].Unified, "+  version: 1.2.0") {
		t.Errorf("diffs %+v", diffs)
	}
	b, _ := json.Marshal(diffs)
	if strings.Contains(string(b), "chart-pw-ui-1234") {
		t.Errorf("the password shows: %s", b)
	}
}
