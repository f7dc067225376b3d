package source

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// --source NAME=DIR of a git source with a path is that path's files; when
// DIR is the path inside a checkout (the directory above it by the path
// holds .git) and the path holds a kustomization, the checkout is the
// repository tree the build sees (Snapshot.Root), as the git provider
// gives it, and its digest is the revision's. Without .git above, or with
// kustomize false, or another path, DIR stays the path's files alone.
func TestCheckoutOverride(t *testing.T) {
	checkout := t.TempDir()
	for name, content := range map[string]string{
		"base/kustomization.yaml":                "resources: []\n",
		"overlays/production/kustomization.yaml": "resources: [../../base]\n",
		".git/HEAD":                              "ref: refs/heads/main\n",
	} {
		p := filepath.Join(checkout, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	overlay := filepath.Join(checkout, "overlays", "production")
	no := false
	resolve := func(g v1alpha1.GitSource, dir string) (root []string, revision string) {
		t.Helper()
		sources := []v1alpha1.Source{{Name: "app", Git: &g}}
		local, err := NewLocal(t.TempDir(), WorkTree{}, map[string]string{"app": dir}, sources)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := (&Resolver{Local: local}).Resolve(context.Background(), sources)
		if err != nil {
			t.Fatal(err)
		}
		for p := range snaps["app"].Root {
			root = append(root, p)
		}
		slices.Sort(root)
		return root, snaps["app"].Revision
	}
	root, rev := resolve(v1alpha1.GitSource{URL: "https://example.com/fleet.git", Path: "overlays/production"}, overlay)
	if got := strings.Join(root, " "); got != "base/kustomization.yaml overlays/production/kustomization.yaml" {
		t.Errorf("root %q, want the checkout's files", got)
	}
	_, alone := resolve(v1alpha1.GitSource{URL: "https://example.com/fleet.git", Path: "overlays/production", Build: v1alpha1.Build{Kustomize: &no}}, overlay)
	if rev == alone || !strings.HasPrefix(rev, LocalPrefix+filepath.ToSlash(overlay)+"@sha256:") {
		t.Errorf("revision %q: not the checkout's digest (the path's alone is %q)", rev, alone)
	}
	for name, g := range map[string]v1alpha1.GitSource{
		"kustomize false": {Path: "overlays/production", Build: v1alpha1.Build{Kustomize: &no}},
		"another path":    {Path: "clusters/production"},
		"no path":         {},
	} {
		g.URL = "https://example.com/fleet.git"
		if root, _ := resolve(g, overlay); root != nil {
			t.Errorf("%s: the build sees %v", name, root)
		}
	}
	if err := os.RemoveAll(filepath.Join(checkout, ".git")); err != nil {
		t.Fatal(err)
	}
	if root, _ := resolve(v1alpha1.GitSource{URL: "https://example.com/fleet.git", Path: "overlays/production"}, overlay); root != nil {
		t.Errorf("not in a checkout: the build sees %v", root)
	}
}
