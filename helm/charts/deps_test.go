package charts_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/helm/helmtest"
)

// parentChart is a chart depending on sub (^1) from repoURL, with a
// Chart.lock pinning sub 1.0.0 when locked.
func parentChart(name, repoURL string, locked bool, extra map[string]string) map[string]string {
	files := helmtest.Chart(name, "1.0.0", extra)
	files["Chart.yaml"] += "dependencies:\n- name: sub\n  version: ^1\n  repository: " + repoURL + "\n"
	if locked {
		files["Chart.lock"] = "dependencies:\n- name: sub\n  repository: " + repoURL + "\n  version: 1.0.0\ndigest: sha256:0\ngenerated: \"2026-01-01T00:00:00Z\"\n"
	}
	return files
}

// Dependencies are fetched as Chart.lock pins them (1.0.0, though 1.2.0
// matches the range), through the cache; vendored ones win; a dependency
// neither vendored nor locked is an error naming the chart and it.
func TestDependenciesFromTheLock(t *testing.T) {
	repo := helmtest.NewRepo(t)
	sub := helmtest.Package("sub", helmtest.Chart("sub", "1.0.0", nil))
	repo.Add("sub", "1.0.0", sub)
	repo.Add("sub", "1.2.0", helmtest.Package("sub", helmtest.Chart("sub", "1.2.0", nil)))
	repo.Add("parent", "1.0.0", helmtest.Package("parent", parentChart("parent", repo.URL, true, nil)))
	repo.Add("vendored", "1.0.0", helmtest.Package("vendored", parentChart("vendored", repo.URL, false, map[string]string{
		"charts/sub/Chart.yaml": "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
	})))
	repo.Add("unlocked", "1.0.0", helmtest.Package("unlocked", parentChart("unlocked", repo.URL, false, nil)))
	ctx := context.Background()
	f := charts.New(charts.Options{})
	fetch := func(chart string) (*engine.Snapshot, error) {
		return f.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: chart, Repository: repo.URL, Insecure: true}, nil)
	}
	snap, err := fetch("parent")
	if err != nil {
		t.Fatal(err)
	}
	if string(snap.Files["charts/sub-1.0.0.tgz"]) != string(sub) {
		t.Fatalf("charts/: %v", keys(snap.Files))
	}
	if c := repo.Charts.Load(); c != 2 {
		t.Fatalf("%d charts downloaded, want the parent and sub", c)
	}
	if _, err := fetch("parent"); err != nil {
		t.Fatal(err)
	}
	vendored, err := fetch("vendored")
	if err != nil {
		t.Fatal(err)
	}
	if _, fetched := vendored.Files["charts/sub-1.0.0.tgz"]; fetched || repo.Charts.Load() != 3 {
		t.Fatalf("vendored: %v, %d charts downloaded (want 3: sub once, then only the vendoring chart)", keys(vendored.Files), repo.Charts.Load())
	}
	_, err = fetch("unlocked")
	if err == nil || !strings.Contains(err.Error(), "chart unlocked: dependency \"sub\"") || !strings.Contains(err.Error(), "Chart.lock") {
		t.Fatalf("unlocked: %v", err)
	}
	t.Logf("unlocked: %v", err)
}

// A chart in another source gets the dependencies of its lock that
// charts/ lacks; its revision is the chart's name and version, then the
// source's revision; without dependencies to fetch nothing is asked.
func TestDependenciesOfAChartInASource(t *testing.T) {
	repo := helmtest.NewRepo(t)
	sub := helmtest.Package("sub", helmtest.Chart("sub", "1.0.0", nil))
	repo.Add("sub", "1.0.0", sub)
	f := charts.New(charts.Options{})
	src := v1alpha1.HelmSource{Source: "repo", Path: "charts/app"}
	dir := &engine.Snapshot{Revision: "main@sha1:abc", Files: files(parentChart("app", repo.URL, true, nil))}
	snap, err := f.Dependencies(context.Background(), "app", src, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "app@1.0.0@main@sha1:abc" || string(snap.Files["charts/sub-1.0.0.tgz"]) != string(sub) {
		t.Fatalf("snapshot %s: %v", snap.Revision, keys(snap.Files))
	}
	if _, added := dir.Files["charts/sub-1.0.0.tgz"]; added {
		t.Fatal("the source's snapshot was changed")
	}
	requests := repo.Requests.Load()
	plain := &engine.Snapshot{Revision: "main@sha1:abc", Files: files(helmtest.Chart("plain", "0.1.0", nil))}
	if snap, err := f.Dependencies(context.Background(), "app", src, plain, nil); err != nil || snap.Revision != "plain@0.1.0@main@sha1:abc" {
		t.Fatalf("no dependencies: %v, %v", snap, err)
	}
	if repo.Requests.Load() != requests {
		t.Fatal("a chart without dependencies to fetch asked the repository")
	}
	local := files(parentChart("app", "file://../sub", true, nil))
	_, err = f.Dependencies(context.Background(), "app", src, &engine.Snapshot{Revision: "r", Files: local}, nil)
	if err == nil || !strings.Contains(err.Error(), `dependency "sub" comes from "file://../sub"`) {
		t.Fatalf("file:// dependency: %v", err)
	}
}

// A chart with more dependencies to fetch than MaxDependencies fails
// before fetching any.
func TestDependencyCountLimit(t *testing.T) {
	repo := helmtest.NewRepo(t)
	chart := helmtest.Chart("many", "1.0.0", nil)
	chart["Chart.yaml"] += "dependencies:\n- {name: a, version: 1.0.0, repository: " + repo.URL + "}\n- {name: b, version: 1.0.0, repository: " + repo.URL + "}\n"
	chart["Chart.lock"] = "dependencies:\n- {name: a, version: 1.0.0, repository: " + repo.URL + "}\n- {name: b, version: 1.0.0, repository: " + repo.URL + "}\n"
	repo.Add("many", "1.0.0", helmtest.Package("many", chart))
	f := charts.New(charts.Options{MaxDependencies: 1})
	_, err := f.Fetch(context.Background(), "app", v1alpha1.HelmSource{Chart: "many", Repository: repo.URL, Insecure: true}, nil)
	if !errors.Is(err, charts.ErrLimit) || !strings.Contains(err.Error(), "2 dependencies to fetch, more than 1") {
		t.Fatalf("got %v", err)
	}
	if c := repo.Charts.Load(); c != 1 {
		t.Fatalf("%d archives downloaded, want only the chart's", c)
	}
}
