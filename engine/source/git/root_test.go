package git

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
)

// fleetFiles is a repository laid out for Flux: a base, an overlay naming
// ../../base, and a directory of plain manifests.
var fleetFiles = map[string]string{
	"base/kustomization.yaml":                "resources: [cm.yaml]\n",
	"base/cm.yaml":                           "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n",
	"overlays/production/kustomization.yaml": "resources: [../../base]\nnamePrefix: prod-\n",
	"plain/cm.yaml":                          "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
	".github/ci.yaml":                        "ci: true\n",
}

// A git source whose path holds a kustomization carries the repository's
// tree (Snapshot.Root) for its build, read once with the path's files and
// counted once in the cache; a source that builds nothing carries none.
func TestKustomizeRoot(t *testing.T) {
	t.Parallel()
	s := daemonTransport(t)
	r := newTestRepo(t, s.root, "fleet")
	r.write(fleetFiles)
	r.commit("c1", "fleet")
	r.push()
	url := s.url("fleet")
	no := false

	f := New(Options{Timeout: testTimeout})
	snap := mustFetch(t, f, v1alpha1.GitSource{URL: url, Path: "overlays/production"}, nil)
	if len(snap.Files) != 1 || snap.Files["kustomization.yaml"] == nil {
		t.Errorf("files: %v, want the path's only", keys(snap.Files))
	}
	if got := strings.Join(keys(snap.Root), " "); got != "base/cm.yaml base/kustomization.yaml overlays/production/kustomization.yaml plain/cm.yaml" {
		t.Errorf("root: %s, want the repository's tree without hidden files", got)
	}
	if &snap.Files["kustomization.yaml"][0] != &snap.Root["overlays/production/kustomization.yaml"][0] {
		t.Error("the path's files are not the tree's: held twice")
	}
	var tree int64
	for _, b := range snap.Root {
		tree += int64(len(b))
	}
	key := snapKey{url: mustKey(t, url), ref: source.DescribeRef(v1alpha1.GitRef{}), path: "overlays/production", whole: true}
	if got := f.snaps[key].bytes; got != tree {
		t.Errorf("the cache counts %d bytes for the snapshot, want the tree's %d, once", got, tree)
	}

	for name, src := range map[string]v1alpha1.GitSource{
		"kustomize false":       {URL: url, Path: "overlays/production", Build: v1alpha1.Build{Kustomize: &no}},
		"path of plain files":   {URL: url, Path: "plain"},
		"the whole repository":  {URL: url},
		"path of the base only": {URL: url, Path: "base", Build: v1alpha1.Build{Kustomize: &no}},
	} {
		if snap := mustFetch(t, f, src, nil); snap.Root != nil {
			t.Errorf("%s: carries the repository's tree", name)
		}
	}

	// The tree is read within the source's limits: the path alone is
	// within them, the repository is not.
	small := New(Options{Timeout: testTimeout, Limits: source.Limits{MaxFiles: 3}})
	err := fetchErr(t, small, v1alpha1.GitSource{URL: url, Path: "overlays/production"}, nil)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), `the repository's tree, in which the kustomization of path "overlays/production" is built`) {
		t.Errorf("error %q does not say the tree is over the limit", err)
	}
	mustFetch(t, small, v1alpha1.GitSource{URL: url, Path: "overlays/production", Build: v1alpha1.Build{Kustomize: &no}}, nil)
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
