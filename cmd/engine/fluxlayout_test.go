package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/internal/fluxoracle"
)

// fluxRefs reads the example's cluster-vars and cluster-secrets copies as
// the objects Flux would read from the API server (a Secret's stringData
// is data there).
func fluxRefs(t *testing.T, dir string) (*corev1.ConfigMap, *corev1.Secret) {
	t.Helper()
	var cm corev1.ConfigMap
	var secret corev1.Secret
	for name, obj := range map[string]any{"cluster-vars.yaml": &cm, "cluster-secrets.yaml": &secret} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, obj); err != nil {
			t.Fatal(err)
		}
	}
	secret.Data = map[string][]byte{}
	for k, v := range secret.StringData {
		secret.Data[k] = []byte(v)
	}
	secret.StringData = nil
	return &cm, &secret
}

// The flux-layout example renders, offline through the resolver engine
// eval uses, byte for byte as Flux renders it: both overlays, the
// staging one with every variable set, the production one with
// cluster-vars lacking replicas (the default ${replicas:=2}) and region
// (${cluster_region:-unknown}), and a multi-line Secret value (newlines
// removed, as Flux does). Each in three forms: the example's (a git
// source of the whole repository, its local copy, and a kustomize
// source), and Flux's own, a git source at the overlay's path (whose
// ../../base is elsewhere in the repository) fetched from a git server
// on 127.0.0.1, and the same given as --source NAME=DIR, DIR the path in
// a checkout.
func TestFluxLayoutRendersAsFlux(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "flux-layout")
	root := gittest.TempDir(t)
	gittest.Publish(t, root, "fleet", filepath.Join(example, "repo"))
	url := gittest.Daemon(t, root) + "/fleet.git"
	t.Setenv("XDG_CACHE_HOME", gittest.TempDir(t))
	for _, tc := range []struct {
		overlay string
		vars    map[string]string
		secret  string
	}{
		{"staging", nil, ""},
		{"production", map[string]string{"cluster_env": "production"}, "line one\nline two"},
	} {
		for _, form := range []string{"kustomize source", "git path", "checkout path"} {
			t.Run(tc.overlay+"/"+form, func(t *testing.T) {
				dir := t.TempDir()
				if err := os.CopyFS(dir, os.DirFS(example)); err != nil {
					t.Fatal(err)
				}
				sync := filepath.Join(dir, "sync.yaml")
				b, err := os.ReadFile(sync)
				if err != nil {
					t.Fatal(err)
				}
				var given map[string]string
				if form != "kustomize source" {
					b = []byte(fluxForm(url))
					if form == "checkout path" {
						if err := os.Mkdir(filepath.Join(dir, "repo", ".git"), 0o755); err != nil {
							t.Fatal(err)
						}
						given = map[string]string{"podinfo": filepath.Join(dir, "repo", "overlays", tc.overlay)}
					}
				}
				if err := os.WriteFile(sync, []byte(strings.ReplaceAll(string(b), "staging", tc.overlay)), 0o644); err != nil {
					t.Fatal(err)
				}
				cm, secret := fluxRefs(t, dir)
				cm.Namespace, secret.Namespace = tc.overlay, tc.overlay
				if tc.vars != nil {
					cm.Data = tc.vars
					secret.Data["db_password"] = []byte(tc.secret)
					writeObjectFile(t, filepath.Join(dir, "cluster-vars.yaml"), cm)
					writeObjectFile(t, filepath.Join(dir, "cluster-secrets.yaml"), &corev1.Secret{
						TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
						ObjectMeta: secret.ObjectMeta,
						Data:       secret.Data,
					})
				}
				want, err := fluxoracle.Render(filepath.Join(dir, "repo", "overlays", tc.overlay), tc.overlay, cm, secret)
				if err != nil {
					t.Fatal(err)
				}

				b, err = os.ReadFile(sync)
				if err != nil {
					t.Fatal(err)
				}
				sf, err := engine.LoadSyncFile(sync, b)
				if err != nil {
					t.Fatal(err)
				}
				snaps, err := readSources(context.Background(), sf, given, "")
				if err != nil {
					t.Fatal(err)
				}
				res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps}, engine.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := res.Err(); err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, o := range res.Targets[0].Objects {
					y, err := yaml.Marshal(o.Object)
					if err != nil {
						t.Fatal(err)
					}
					got[o.GetKind()+"/"+o.GetName()] = string(y)
				}
				if len(want) != 5 {
					t.Errorf("Flux renders %d objects, want the example's 5", len(want))
				}
				for _, k := range slices.Sorted(maps.Keys(want)) {
					if got[k] != want[k] {
						t.Errorf("%s:\n%s\nFlux renders:\n%s", k, got[k], want[k])
					}
				}
				for k := range got {
					if _, ok := want[k]; !ok {
						t.Errorf("%s: not rendered by Flux", k)
					}
				}
				if !strings.Contains(want["ConfigMap/script"], "${ENVIRONMENT}") || strings.Contains(want["Deployment/podinfo"], "replicas: 2\n") == (tc.overlay == "staging") {
					t.Errorf("the example no longer shows the disabled annotation and the default:\n%s\n%s", want["ConfigMap/script"], want["Deployment/podinfo"])
				}
				if tc.secret != "" && !strings.Contains(want["Secret/credentials"], "DB_PASSWORD: line oneline two\n") {
					t.Errorf("Secret/credentials: the value's newlines are not removed:\n%s", want["Secret/credentials"])
				}
			})
		}
	}
}

// fluxForm is the example's ManifestSync as a Flux Kustomization reads
// the repository at url: a git source at the overlay's path, built in the
// whole repository and substituted.
func fluxForm(url string) string {
	return `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata:
  name: podinfo
  namespace: staging
spec:
  sources:
  - name: podinfo
    git:
      url: ` + url + `
      ref: {branch: main}
      path: overlays/staging
      substituteFrom:
      - kind: ConfigMap
        name: cluster-vars
      - kind: Secret
        name: cluster-secrets
  targets:
  - name: staging
    namespace: staging
`
}

func writeObjectFile(t *testing.T, p string, obj any) {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
