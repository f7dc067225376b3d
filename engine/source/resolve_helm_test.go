package source

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// helmFetcher records what the resolver asks of it: a chart form gets a
// made-up chart, a source form gets its directory back, revision and all.
type helmFetcher struct{ asked []string }

func (h *helmFetcher) FetchHelm(_ context.Context, name string, src v1alpha1.HelmSource, dir *engine.Snapshot) (*engine.Snapshot, error) {
	if dir == nil {
		h.asked = append(h.asked, name+" chart "+src.Chart)
		return &engine.Snapshot{Revision: src.Chart + "@1.0.0@sha256:00", Files: map[string][]byte{
			"Chart.yaml": []byte("name: " + src.Chart), "sub/Chart.yaml": []byte("name: sub"),
		}}, nil
	}
	h.asked = append(h.asked, name+" dir "+dir.Revision)
	return dir, nil
}

// A helm source of the source form is read after the source it names,
// wherever it stands in the spec, as the subtree at its path, with that
// source's revision; it may name another helm source.
func TestResolverReadsHelmSourcesAfterTheirSource(t *testing.T) {
	h := &helmFetcher{}
	r := Resolver{
		Git: fetcher{"test://repo": {Revision: "main@sha1:abc", Files: map[string][]byte{
			"charts/app/Chart.yaml":         []byte("name: app"),
			"charts/app/templates/a.yaml":   []byte("a"),
			"charts/other/Chart.yaml":       []byte("name: other"),
			"charts/application/Chart.yaml": []byte("name: application"),
		}}},
		Helm: h,
	}
	sources := []v1alpha1.Source{
		{Name: "inner", Helm: &v1alpha1.HelmSource{Source: "remote", Path: "sub"}},
		{Name: "app", Helm: &v1alpha1.HelmSource{Source: "repo", Path: "charts/app/"}},
		{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}},
		{Name: "remote", Helm: &v1alpha1.HelmSource{Chart: "web", Repository: "https://charts.example.com"}},
	}
	snaps, err := r.Resolve(context.Background(), sources)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.asked, "; "); got != "remote chart web; inner dir web@1.0.0@sha256:00; app dir main@sha1:abc" {
		t.Fatalf("asked: %s", got)
	}
	app := snaps["app"]
	if len(app.Files) != 2 || string(app.Files["Chart.yaml"]) != "name: app" || string(app.Files["templates/a.yaml"]) != "a" {
		t.Fatalf("app's files: %v", app.Files)
	}
	if string(snaps["inner"].Files["Chart.yaml"]) != "name: sub" {
		t.Fatalf("inner's files: %v", snaps["inner"].Files)
	}
}

// A chart directory that is not one, a path out of its source, a source
// without files and a cycle are errors naming the source, and no helm
// source is read without a HelmFetcher.
func TestResolverRefusesHelmSourcesWithoutAChart(t *testing.T) {
	repo := fetcher{"test://repo": {Revision: "main@sha1:abc", Files: map[string][]byte{"charts/app/Chart.yaml": []byte("name: app")}}}
	for _, c := range []struct {
		name    string
		sources []v1alpha1.Source
		helm    HelmFetcher
		want    string
	}{
		{"no Chart.yaml", []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}},
			{Name: "app", Helm: &v1alpha1.HelmSource{Source: "repo", Path: "charts"}},
		}, &helmFetcher{}, `source "app": helm: repo/charts/Chart.yaml: no Chart.yaml in source "repo"`},
		{"out of the source", []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://repo"}},
			{Name: "app", Helm: &v1alpha1.HelmSource{Source: "repo", Path: "../x"}},
		}, &helmFetcher{}, `path "../x": leaves source "repo"`},
		{"no such source", []v1alpha1.Source{
			{Name: "app", Helm: &v1alpha1.HelmSource{Source: "nothere", Path: "x"}},
		}, &helmFetcher{}, `source "nothere": no such source with files`},
		{"a cycle", []v1alpha1.Source{
			{Name: "a", Helm: &v1alpha1.HelmSource{Source: "b"}},
			{Name: "b", Helm: &v1alpha1.HelmSource{Source: "a"}},
		}, &helmFetcher{}, `source "a": helm sources name each other in a cycle`},
		{"not wired", []v1alpha1.Source{
			{Name: "web", Helm: &v1alpha1.HelmSource{Chart: "web", Repository: "https://charts.example.com"}},
		}, nil, `source "web": helm sources are not wired`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Resolver{Git: repo, Helm: c.helm}
			_, err := r.Resolve(context.Background(), c.sources)
			var se *Error
			if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an *Error with %q", err, c.want)
			}
		})
	}
}
