package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/engine/importer"
)

// importFixtures is where engine/importer keeps its Flux and Argo CD
// fixtures and the repository they name (repo/, the checkout of
// platformRepo).
var importFixtures = filepath.Join("..", "..", "engine", "importer", "testdata")

const platformRepo = "https://git.example.com/org/platform.git"

// importTo runs engine import of fixture files into a new directory, with
// the fixture repository as the checkout, and returns the directory.
func importTo(t *testing.T, files ...string) string {
	t.Helper()
	out := t.TempDir()
	args := []string{"import", "--repo", platformRepo + "=" + filepath.Join(importFixtures, "repo"), "-o", out}
	for _, f := range files {
		args = append(args, filepath.Join(importFixtures, f))
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("engine %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return out
}

// evalObjects runs engine eval of a sync file with --source overrides and
// returns its one target's objects by "Kind/name".
func evalObjects(t *testing.T, sync string, sources ...string) map[string]map[string]any {
	t.Helper()
	args := []string{"eval", "-f", sync, "--show-secrets"}
	for _, s := range sources {
		args = append(args, "--source", s)
	}
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("engine %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	}
	return byKindName(t, stdout.Bytes(), "")
}

// byKindName parses a YAML stream into its objects by "Kind/name", each
// namespaced one without a namespace put in namespace ns (where Helm and
// kustomize-controller apply it), when ns is set.
func byKindName(t *testing.T, stream []byte, ns string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(string(stream), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		u := unstructured.Unstructured{Object: m}
		if ns != "" && u.GetNamespace() == "" && u.GetKind() != "CustomResourceDefinition" {
			u.SetNamespace(ns)
		}
		out[u.GetKind()+"/"+u.GetName()] = u.Object
	}
	return out
}

// sameObjects compares the objects rendered by the ManifestSync with what
// the original tool renders, object by object.
func sameObjects(t *testing.T, got, want map[string]map[string]any) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("the original renders nothing")
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, _ := yaml.Marshal(got[k])
		w, _ := yaml.Marshal(want[k])
		if !bytes.Equal(g, w) {
			t.Errorf("%s: the ManifestSync renders\n%s\nthe original\n%s", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: rendered by the ManifestSync only", k)
		}
	}
}

// fluxObject is the object of kind and name among the fixtures of file,
// as Flux's library takes it.
func fluxObject(t *testing.T, file, kind, name string) unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(importFixtures, file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := importer.Decode(file, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o.Content}
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("%s: no %s %s", file, kind, name)
	return unstructured.Unstructured{}
}

// TestImportFluxRendersAsFlux: the ManifestSyncs engine import writes of
// the fixture Kustomizations render, offline, the objects Flux's
// kustomize-controller would apply, computed with Flux's own library
// (github.com/fluxcd/pkg/kustomize: the generator that writes
// targetNamespace and patches into the kustomization, or makes one for a
// plain directory; its build; its post-build substitution reading the
// ConfigMap of substituteFrom). web builds an overlay over ../base, with
// substitute over substituteFrom and a ${var:=default}; infra is a plain
// directory. The field import reports as not carried over (images) is
// left out of the original for the comparison, and so is decryption, which
// import carries over: web's sync file then needs an age key (its files
// are plain, so any key reads them as they are).
func TestImportFluxRendersAsFlux(t *testing.T) {
	out := importTo(t, "flux.yaml")
	vars := &corev1.ConfigMap{Data: map[string]string{"domain": "example.org", "cluster_env": "from-configmap"}}
	vars.Name, vars.Namespace = "cluster-vars", "flux-system"
	vars.APIVersion, vars.Kind = "v1", "ConfigMap"
	b, err := yaml.Marshal(vars)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "flux-system", "cluster-vars.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(importFixtures, "repo")
	// web's git source is read from its path in a checkout (.git beside
	// it), whose whole tree its build sees, as Flux's.
	checkout := t.TempDir()
	if err := os.CopyFS(checkout, os.DirFS(repo)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(checkout, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, source string }{
		{"web", "apps/prod", filepath.Join(checkout, "apps", "prod")},
		{"infra", "infra", filepath.Join(repo, "infra")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join("..", "..", "examples", "sops-secret", "demo.agekey"))
			got := evalObjects(t, filepath.Join(out, "flux-system", tc.name+".yaml"), "platform="+tc.source)

			ks := fluxObject(t, "flux.yaml", "Kustomization", tc.name)
			unstructured.RemoveNestedField(ks.Object, "spec", "images")
			unstructured.RemoveNestedField(ks.Object, "spec", "decryption")
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(repo)); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(root, tc.path)
			if _, err := fluxkustomize.NewGenerator(root, ks).WriteFile(dir); err != nil {
				t.Fatal(err)
			}
			rm, err := fluxkustomize.SecureBuild(root, dir, false)
			if err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithObjects(vars).Build()
			var stream bytes.Buffer
			for _, res := range rm.Resources() {
				sub, err := fluxkustomize.SubstituteVariables(context.Background(), c, ks, res)
				if err != nil {
					t.Fatal(err)
				}
				if sub == nil {
					sub = res
				}
				y, err := sub.AsYAML()
				if err != nil {
					t.Fatal(err)
				}
				stream.WriteString("---\n")
				stream.Write(y)
			}
			sameObjects(t, got, byKindName(t, stream.Bytes(), ""))
		})
	}
}

// helmCLIPath is the Helm v3 CLI make helm builds (make test builds it
// first): the oracle of what a chart renders.
var helmCLIPath = filepath.Join("..", "..", "bin", "helm")

// helmTemplate runs bin/helm template with its own empty configuration.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(helmCLIPath); err != nil {
		t.Skip("no bin/helm (make helm)")
	}
	home := t.TempDir()
	cmd := exec.Command(helmCLIPath, append([]string{"template"}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "c"), "HELM_CACHE_HOME="+filepath.Join(home, "h"), "HELM_DATA_HOME="+filepath.Join(home, "d"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return out
}

// writeTemp writes data to a file of a new directory.
func writeTemp(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestImportHelmRendersAsHelmTemplate: the ManifestSyncs engine import
// writes of a Flux HelmRelease (values over valuesFrom, the release name
// targetNamespace-name) and of an Argo CD Application with a chart and
// $values files (valueFiles, then valuesObject, which replaces values,
// then parameters as --set) render, offline, what `helm template` renders
// with the same values in Flux's and Argo CD's order, release and
// namespace.
func TestImportHelmRendersAsHelmTemplate(t *testing.T) {
	out := importTo(t, "flux.yaml", "argo.yaml")
	chart := filepath.Join(importFixtures, "repo", "charts", "podinfo")

	t.Run("HelmRelease", func(t *testing.T) {
		cmValues := "replicaCount: 2\nui:\n  color: \"#ff0000\"\n  message: from the configmap\n"
		cm := &corev1.ConfigMap{Data: map[string]string{"values.yaml": cmValues}}
		cm.APIVersion, cm.Kind, cm.Name, cm.Namespace = "v1", "ConfigMap", "podinfo-values", "flux-system"
		b, err := yaml.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "flux-system", "podinfo-values.yaml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		got := evalObjects(t, filepath.Join(out, "flux-system", "podinfo.yaml"), "podinfo="+chart)
		want := helmTemplate(t, "apps-podinfo", chart, "--namespace", "apps", "--include-crds",
			"-f", writeTemp(t, "cm.yaml", cmValues),
			"-f", writeTemp(t, "values.yaml", "ui:\n  message: hello from flux\n"))
		sameObjects(t, got, byKindName(t, want, "apps"))
		if d := got["Deployment/apps-podinfo"]; d == nil || !strings.Contains(mustYAML(t, d), "hello from flux") {
			t.Errorf("the HelmRelease's values do not win over its valuesFrom:\n%s", mustYAML(t, d))
		}
	})
	t.Run("Application", func(t *testing.T) {
		got := evalObjects(t, filepath.Join(out, "argocd", "podinfo.yaml"), "chart="+chart, "values="+filepath.Join(importFixtures, "repo"))
		want := helmTemplate(t, "podinfo-argo", chart, "--namespace", "podinfo", "--include-crds",
			"-f", filepath.Join(importFixtures, "repo", "envs", "prod", "values.yaml"),
			"-f", writeTemp(t, "values.yaml", "ui:\n  message: hello from argo\nimage:\n  tag: 6.7.1\nreplicaCount: 4\n"),
			"--set", "service.port=9999", "--set", "image.tag=6.7.2")
		sameObjects(t, got, byKindName(t, want, "podinfo"))
		// The values file's replicaCount 3 loses to valuesObject's 4, whose
		// image.tag 6.7.1 loses to the parameter's 6.7.2; values, beside
		// valuesObject, are ignored as Argo CD ignores them: the file's
		// ui.color stays.
		d := mustYAML(t, got["Deployment/podinfo-argo"])
		for _, w := range []string{"containerPort: 9999", "replicas: 4", ":6.7.2", `value: '#34577c'`} {
			if !strings.Contains(d, w) {
				t.Errorf("the Application's values, in Argo CD's order, do not give %q:\n%s", w, d)
			}
		}
	})
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A file larger than engine import reads is refused before it is read,
// naming it; a hostile directory cannot make it read gigabytes.
func TestImportFileBound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxImportFile + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import", p}, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "huge.yaml: 16777217 bytes, more than the 16777216 a file may have") {
		t.Errorf("exit %d\n%s", code, stderr.String())
	}
}
