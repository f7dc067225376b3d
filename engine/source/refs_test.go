package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// refReader is an ObjectReader of refs by "Kind/namespace/name"; a
// missing one wraps ErrNotFound as the operator's does.
type refReader map[string]map[string]any

func (c refReader) Get(_ context.Context, o v1alpha1.ObjectSource) (map[string]any, error) {
	if o.APIVersion != "v1" {
		return nil, fmt.Errorf("apiVersion %q", o.APIVersion)
	}
	if obj := c[o.Kind+"/"+o.Namespace+"/"+o.Name]; obj != nil {
		return obj, nil
	}
	return nil, fmt.Errorf("%s %s/%s %w", o.Kind, o.Namespace, o.Name, ErrNotFound)
}

func (c refReader) List(context.Context, string, *engine.ObjectSet) ([]map[string]any, error) {
	return nil, errors.New("not a list")
}

// The refs of a source are read in the ManifestSync's namespace into its
// snapshot (a copy: the git cache's is not changed), Secret values
// decoded; the revision starts with their digest and still ends with the
// commit; a kustomize source gets a snapshot of refs alone; a missing
// optional ref is absent, a missing required one fails naming it.
func TestResolverReadsRefs(t *testing.T) {
	vars := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "vars"}, "data": map[string]any{"cluster_env": "staging"}}
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "creds"}, "data": map[string]any{"token": "czNjcjN0LXQwa2Vu"}}
	reader := refReader{"ConfigMap/apps/vars": vars, "Secret/apps/creds": secret, "Secret/other/creds": secret}
	repo := &engine.Snapshot{Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567", Files: map[string][]byte{"a.yaml": []byte("a: 1\n")}}
	from := []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "creds"}, {Kind: "ConfigMap", Name: "gone", Optional: true}}
	sources := []v1alpha1.Source{
		{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo", Build: v1alpha1.Build{SubstituteFrom: from}}},
		{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", SubstituteFrom: from[:1]}},
	}
	r := Resolver{Namespace: "apps", Git: fetcher{"test://repo": repo}, Objects: func(*v1alpha1.Source) (ObjectReader, error) { return reader, nil }}
	snaps, err := r.Resolve(context.Background(), sources)
	if err != nil {
		t.Fatal(err)
	}
	got := snaps["repo"]
	if got == repo || repo.Refs != nil {
		t.Error("the fetcher's snapshot was changed, not copied")
	}
	if got.Refs["ConfigMap/vars"]["cluster_env"] != "staging" || got.Refs["Secret/creds"]["token"] != "s3cr3t-t0ken" {
		t.Errorf("refs %v", got.Refs)
	}
	if _, ok := got.Refs["ConfigMap/gone"]; ok || len(got.Refs) != 2 {
		t.Errorf("refs %v: the missing optional one should be absent", got.Refs)
	}
	if !strings.HasPrefix(got.Revision, RefsPrefix+"sha256:") || OwnRevision(got.Revision) != repo.Revision || OwnRevision(repo.Revision) != repo.Revision {
		t.Errorf("revision %q", got.Revision)
	}
	app := snaps["app"]
	if app == nil || app.Files != nil || app.Refs["ConfigMap/vars"]["cluster_env"] != "staging" || !strings.HasPrefix(app.Revision, RefsPrefix) || strings.Contains(app.Revision, "@") {
		t.Errorf("kustomize source snapshot %+v", app)
	}

	// A changed value is a new revision.
	vars["data"] = map[string]any{"cluster_env": "production"}
	again, err := r.Resolve(context.Background(), sources)
	if err != nil {
		t.Fatal(err)
	}
	if again["repo"].Revision == got.Revision || again["app"].Revision == app.Revision {
		t.Error("a changed ConfigMap did not change the revisions")
	}

	for _, tc := range []struct {
		ref  v1alpha1.SubstituteReference
		want string
	}{
		{v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "gone"}, `source "repo": ConfigMap/gone: ConfigMap apps/gone not found`},
		// No namespace can be named: the name is one of the ManifestSync's.
		{v1alpha1.SubstituteReference{Kind: "Secret", Name: "other/creds"}, `source "repo": Secret/other/creds: the name of a Secret of namespace "apps": a lowercase RFC 1123 subdomain`},
	} {
		src := []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo", Build: v1alpha1.Build{SubstituteFrom: []v1alpha1.SubstituteReference{tc.ref}}}}}
		_, err := r.Resolve(context.Background(), src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.ref, err, tc.want)
		}
	}
}

// Helm valuesFrom entries with a kind are refs too; one named twice is
// read once, required if either entry is.
func TestRefsOf(t *testing.T) {
	src := &v1alpha1.Source{Name: "chart", Helm: &v1alpha1.HelmSource{ValuesFrom: []v1alpha1.HelmValuesReference{
		{Kind: "ConfigMap", Name: "values", Optional: true},
		{Source: "repo", Path: "values.yaml"},
		{Params: true},
		{Kind: "ConfigMap", Name: "values", ValuesKey: "extra.yaml"},
		{Kind: "Secret", Name: "creds", Optional: true},
	}}}
	got := RefsOf(src)
	want := []Ref{{Kind: "ConfigMap", Name: "values"}, {Kind: "Secret", Name: "creds", Optional: true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RefsOf = %v, want %v", got, want)
	}
}

// Offline, a ref is its copy beside the sync file, NAME.yaml: a Secret's
// stringData is merged over its data; no copy is a missing ref; a copy of
// another kind is the user's error.
func TestLocalRefs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("creds.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ndata: {a: YQ==}\nstringData: {b: bee}\n")
	write("vars.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: vars}\n")
	local, err := NewLocal(dir, WorkTree{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Resolver{Namespace: "apps", Local: local}
	src := func(refs ...v1alpha1.SubstituteReference) []v1alpha1.Source {
		return []v1alpha1.Source{{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", SubstituteFrom: refs}}}
	}
	snaps, err := r.Resolve(context.Background(), src(v1alpha1.SubstituteReference{Kind: "Secret", Name: "creds"}, v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "none", Optional: true}))
	if err != nil {
		t.Fatal(err)
	}
	if got := snaps["app"].Refs; fmt.Sprint(got) != "map[Secret/creds:map[a:a b:bee]]" {
		t.Errorf("refs %v", got)
	}
	_, err = r.Resolve(context.Background(), src(v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "none"}))
	if err == nil || !strings.Contains(err.Error(), `source "app": ConfigMap/none: no local copy at `+filepath.Join(dir, "none.yaml")) {
		t.Errorf("missing copy: %v", err)
	}
	_, err = r.Resolve(context.Background(), src(v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "vars"}))
	var le *LocalError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "vars.yaml holds a Secret, want a v1 ConfigMap") {
		t.Errorf("copy of another kind: %v", err)
	}
}
