package kustomize

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildMatchesCLI builds every kustomization that testdata has an
// expected output for and compares with it: CASE/a_b.expected.yaml is what
// the kustomize CLI printed for `kustomize build CASE/a/b`
// (hack/kustomize-expected.sh rewrites them).
func TestBuildMatchesCLI(t *testing.T) {
	wants, err := filepath.Glob(filepath.Join("testdata", "*", "*.expected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(wants) < 3 {
		t.Fatalf("found %d expected outputs, want at least 3", len(wants))
	}
	for _, want := range wants {
		caseDir := filepath.Dir(want)
		dir := strings.ReplaceAll(strings.TrimSuffix(filepath.Base(want), ".expected.yaml"), "_", "/")
		t.Run(filepath.Base(caseDir)+"/"+dir, func(t *testing.T) {
			files := readTree(t, caseDir)
			got, err := Build(files, dir)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, b) {
				t.Errorf("differs from %s:\n%s", want, got)
			}
		})
	}
}

// readTree reads a directory into a file tree, leaving out expected outputs.
func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".expected.yaml") {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestBuildRefusesRemote(t *testing.T) {
	for _, tc := range []struct{ name, kustomization, want string }{
		{"git base", "resources:\n- github.com/kubernetes-sigs/kustomize//examples/multibases?ref=v1.0.6\n", `app/kustomization.yaml: resources[0]: remote reference "github.com/`},
		{"https file", "resources: [ok.yaml]\npatches:\n- path: https://example.com/patch.yaml\n", `app/kustomization.yaml: patches[0].path: remote reference "https://example.com/patch.yaml"`},
		{"ssh", "components: [\"git@github.com:org/repo.git//c\"]\n", `components[0]: remote reference "git@github.com:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string][]byte{
				"app/kustomization.yaml": []byte(tc.kustomization),
				"app/ok.yaml":            []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"),
			}
			_, err := Build(files, "app")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Through a base: the overlay is fine, the base it names is not.
	files := map[string][]byte{
		"overlay/kustomization.yaml": []byte("resources: [../base]\n"),
		"base/kustomization.yaml":    []byte("resources: [https://example.com/all.yaml]\n"),
		// A remote reference in a kustomization the build does not use
		// does not matter, nor a URL inside an inline patch.
		"other/kustomization.yaml": []byte("resources: [https://example.com/x.yaml]\n"),
	}
	if _, err := Build(files, "overlay"); err == nil || !strings.Contains(err.Error(), "base/kustomization.yaml: resources[0]") {
		t.Errorf("remote base: %v", err)
	}
	files = map[string][]byte{
		"app/kustomization.yaml":   []byte("resources: [cm.yaml]\npatches:\n- patch: |\n    apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: cm, annotations: {docs: \"https://example.com\"}}\n"),
		"app/cm.yaml":              []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n"),
		"other/kustomization.yaml": []byte("resources: [https://example.com/x.yaml]\n"),
	}
	if _, err := Build(files, "app"); err != nil {
		t.Errorf("inline patch with a URL: %v", err)
	}
}

func TestBuildErrors(t *testing.T) {
	_, err := Build(map[string][]byte{"app/kustomization.yaml": []byte("resources: [missing.yaml]\n")}, "app")
	if err == nil || !strings.Contains(err.Error(), "kustomize build app:") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing resource: %v", err)
	}
	_, err = Build(map[string][]byte{"app/x.yaml": []byte("a: 1\n")}, "app")
	if err == nil || !strings.Contains(err.Error(), "unable to find one of 'kustomization.yaml'") {
		t.Errorf("no kustomization: %v", err)
	}
}

// A path above the tree's root is refused, wherever a kustomization
// names one (kustomize's in-memory tree would take "/../base" for
// "/base"); a file beside the kustomization's directory, inside the tree,
// is read as Flux reads it.
func TestBuildStaysInTree(t *testing.T) {
	cm := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	for _, tc := range []struct{ kustomization, want string }{
		{"resources: [../../base]\n", `app/kustomization.yaml: resources[0]: path "../../base" leaves the source's tree`},
		{"resources: [ok.yaml]\npatches:\n- path: ../../p.yaml\n", `patches[0].path: path "../../p.yaml" leaves`},
		{"configMapGenerator:\n- name: g\n  files: [key=../../etc/passwd]\n", `configMapGenerator[0].files[0]: path "../../etc/passwd" leaves`},
		{"secretGenerator:\n- name: g\n  envs: [../../.env]\n", `secretGenerator[0].envs[0]: path "../../.env" leaves`},
	} {
		files := map[string][]byte{"app/kustomization.yaml": []byte(tc.kustomization), "app/ok.yaml": cm, "base/kustomization.yaml": []byte("resources: [../app/ok.yaml]\n")}
		if _, err := Build(files, "app"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.kustomization, err, tc.want)
		}
	}
	// Through a base: the overlay is in the tree, its base reaches out.
	files := map[string][]byte{"o/kustomization.yaml": []byte("resources: [../b]\n"), "b/kustomization.yaml": []byte("resources: [../../x]\n")}
	if _, err := Build(files, "o"); err == nil || !strings.Contains(err.Error(), `b/kustomization.yaml: resources[0]: path "../../x" leaves`) {
		t.Errorf("base leaving the tree: %v", err)
	}
	files = map[string][]byte{"app/kustomization.yaml": []byte("resources: [../common/cm.yaml]\n"), "common/cm.yaml": cm}
	out, err := Build(files, "app")
	if err != nil || !bytes.Contains(out, []byte("name: x")) {
		t.Errorf("a file beside the kustomization: %s %v", out, err)
	}
}
