package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

// The web UI's diff of a ManifestSync with an oci source (credentials in
// a Secret) and an http source shows the objects they would create, the
// registry read with the Secret as the user reads it: a user who may not
// read the Secret gets the API server's refusal naming it, not a diff, and
// the password shows nowhere.
func TestUIEvaluatorOCIAndHTTP(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	const password = "ui-oci-pw-6620"
	reg := registrytest.StartWith(t, registrytest.Config{User: "ci", Password: password})
	auth := base64.StdEncoding.EncodeToString([]byte("ci:" + password))
	config := []byte(`{"auths":{"` + reg.Addr + `":{"auth":"` + auth + `"}}}`)
	if _, err := oci.Push(ctx, &oci.Dir{Files: map[string][]byte{"cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-oci}\ndata: {a: b}\n")}},
		"oci://"+reg.Addr+"/app:1", oci.PushOptions{Insecure: true, DockerConfigJSON: config}); err != nil {
		t.Fatal(err)
	}
	archive := tgzOf(t, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-http}\n"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(archive))
	}))
	t.Cleanup(srv.Close)
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: config}}); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{
				{Name: "app", OCI: &v1alpha1.OCISource{URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: "1"}, Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "registry"}}},
				{Name: "cfg", HTTP: &v1alpha1.HTTPSource{URL: srv.URL + "/cfg.tgz", Digest: digestOf(archive), Insecure: true}},
			},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}},
		},
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	var objects []string
	for _, d := range diffs {
		objects = append(objects, d.Object)
	}
	if strings.Join(objects, ", ") != "ConfigMap "+ns+"/from-http, ConfigMap "+ns+"/from-oci" {
		t.Errorf("diffs of %v; want the ConfigMaps of both sources", objects)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nobody, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	diffs, err = inspect.Diff(ctx, nobody, ms, ev, "")
	if err == nil || !strings.Contains(err.Error(), "secretRef "+ns+"/registry") || !strings.Contains(err.Error(), `is forbidden: User "nobody"`) {
		t.Errorf("error %v: want the registry's Secret refused to the user", err)
	}
	for _, l := range []string{password, auth} {
		noValue(t, l, diffs, err)
	}
}
