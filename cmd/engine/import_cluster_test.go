package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/manifestsync/manifestsync/engine/importer"
)

// whereLine is the FILE:LINE of a finding in a file's header.
var whereLine = regexp.MustCompile(`^# - [^ ]+:\d+: `)

// importedFiles reads the ManifestSyncs engine import wrote under dir:
// each file's header findings (without their FILE:LINE, sorted) and body,
// by NAMESPACE/NAME.yaml.
func importedFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var header, body []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "#") {
				header = append(header, whereLine.ReplaceAllString(line, "# - "))
			} else {
				body = append(body, line)
			}
		}
		slices.Sort(header)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = strings.Join(header, "\n") + "\n" + strings.Join(body, "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportFromCluster: engine import --from-cluster, against an API
// server with minimal Flux and Argo CD CRDs (testdata/import/crds.yaml)
// and the importer's fixtures created in a namespace, writes the same
// ManifestSyncs, with the same findings, as the import of the fixtures'
// files. Of Argo CD's cluster Secrets it reads the metadata alone: the
// cluster generator of the monitoring ApplicationSet, whose clusters'
// servers are in their data, writes nothing, and says why; no Secret
// value is printed.
func TestImportFromCluster(t *testing.T) {
	env := needCluster(t)
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "import", "crds.yaml")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	fluxNS, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	tmp := t.TempDir()
	var files []string
	for _, name := range []string{"flux.yaml", "argo.yaml"} {
		b, err := os.ReadFile(filepath.Join(importFixtures, name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("namespace: flux-system", "namespace: "+fluxNS, "namespace: argocd", "namespace: "+ns).Replace(string(b))
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		objs, err := importer.Decode(name, []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			u := &unstructured.Unstructured{Object: o.Content}
			if err := env.Client.Create(context.Background(), u); err != nil {
				t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
	kc, err := env.Kubeconfig("import")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	repo := "--repo=" + platformRepo + "=" + filepath.Join(importFixtures, "repo")

	fromFiles := filepath.Join(tmp, "files")
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"import", repo, "-o", fromFiles}, files...), &stdout, &stderr); code != 0 {
		t.Fatalf("import of the files: exit %d\n%s", code, stderr.String())
	}
	fromCluster := filepath.Join(tmp, "cluster")
	stderr.Reset()
	for _, n := range []string{fluxNS, ns} {
		if code := run([]string{"import", "--from-cluster", "--kubeconfig", kubeconfig, "-n", n, repo, "-o", fromCluster}, &stdout, &stderr); code != 0 {
			t.Fatalf("import --from-cluster -n %s: exit %d\n%s", n, code, stderr.String())
		}
	}
	want, got := importedFiles(t, fromFiles), importedFiles(t, fromCluster)
	monitoring := filepath.Join(ns, "monitoring.yaml")
	if _, ok := want[monitoring]; !ok {
		t.Fatalf("the import of the files wrote no %s: %v", monitoring, slices.Sorted(maps.Keys(want)))
	}
	delete(want, monitoring)
	if len(got) != len(want) || len(want) < 7 {
		t.Errorf("from the cluster %d ManifestSyncs, from the files %d (want 7 of them, besides monitoring): %v", len(got), len(want), slices.Sorted(maps.Keys(got)))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s from the cluster:\n%s\nfrom the files:\n%s", name, got[name], w)
		}
	}
	for _, want := range []string{
		"ApplicationSet " + ns + "/monitoring spec.generators[0].clusters: cluster Secret " + ns + "/cluster-prod-eu: its server is in its data, which import does not read from a cluster",
		"ApplicationSet " + ns + "/monitoring spec.generators: generated no Application: nothing written",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	for name, s := range got {
		if strings.Contains(s, "never-printed") {
			t.Errorf("%s holds a cluster Secret's data", name)
		}
	}
	if strings.Contains(stderr.String(), "never-printed") {
		t.Errorf("stderr holds a cluster Secret's data")
	}
}
