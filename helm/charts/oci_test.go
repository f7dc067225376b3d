package charts_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/helm/helmtest"
	"github.com/manifestsync/manifestsync/internal/registrytest"
)

// counted is a proxy in front of a registry that counts requests by kind:
// "HEAD manifests", "GET tags", "GET blobs", ...
type counted struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *counted) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[kind]
}

func (c *counted) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
}

func countingProxy(t *testing.T, target string) (string, *counted) {
	return authProxy(t, target, "", "")
}

// authProxy is countingProxy answering 401 to requests without basic auth
// user and password, when they are set.
func authProxy(t *testing.T, target, user, password string) (string, *counted) {
	t.Helper()
	u, _ := url.Parse("http://" + target)
	c := &counted{counts: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := "other"
		for _, k := range []string{"manifests", "tags", "blobs"} {
			if strings.Contains(r.URL.Path, "/"+k+"/") {
				kind = k
			}
		}
		c.mu.Lock()
		c.counts[r.Method+" "+kind]++
		c.mu.Unlock()
		if u, p, _ := r.BasicAuth(); (user != "" || password != "") && (u != user || p != password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), c
}

// The same chart archive from Debian's docker-registry over OCI and from a
// chart repository gives the same files and revision (the digest of the
// archive); a range picks the newest tag; an unchanged poll is one tag
// listing and one manifest HEAD, no blob; an exact version lists no tags.
func TestOCIChartIsTheRepositorysChart(t *testing.T) {
	registry := registrytest.Start(t)
	host, count := countingProxy(t, registry)
	archives := map[string][]byte{}
	repo := helmtest.NewRepo(t)
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
		archives[v] = helmtest.Package("demo", helmtest.Chart("demo", v, nil))
		helmtest.Push(t, host+"/charts/demo", v, archives[v])
		repo.Add("demo", v, archives[v])
	}
	ctx := context.Background()
	f := charts.New(charts.Options{})
	fromRepo, err := f.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL, Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	count.reset()
	o := charts.New(charts.Options{}) // a cache of its own: the layer is downloaded
	src := v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: "oci://" + host + "/charts", Insecure: true}
	fromOCI, err := o.Fetch(ctx, "app", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fromOCI.Revision != fromRepo.Revision || fromOCI.Revision != "demo@1.1.0@"+helmtest.Digest(archives["1.1.0"]) {
		t.Fatalf("revisions: oci %s, repository %s", fromOCI.Revision, fromRepo.Revision)
	}
	sameFiles(t, fromOCI.Files, helmtest.Chart("demo", "1.1.0", nil))
	if count.get("GET blobs") != 1 {
		t.Fatalf("first fetch: %v", count.counts)
	}
	t.Logf("first fetch: %v", count.counts)
	count.reset()
	const polls = 10
	for range polls {
		again, err := o.Fetch(ctx, "app", src, nil)
		if err != nil || again.Revision != fromOCI.Revision {
			t.Fatalf("poll: %v, %v", again, err)
		}
	}
	t.Logf("%d unchanged polls: %v", polls, count.counts)
	if count.get("GET tags") != polls || count.get("HEAD manifests") != polls || count.get("GET manifests") != 0 || count.get("GET blobs") != 0 {
		t.Fatalf("%d unchanged polls: %v; want a tag listing and a manifest HEAD each, nothing more", polls, count.counts)
	}

	// An exact version, given in the chart: no tag listing.
	count.reset()
	exact, err := o.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "oci://" + host + "/charts/demo", Version: "1.0.0", Insecure: true}, nil)
	if err != nil || exact.Revision != "demo@1.0.0@"+helmtest.Digest(archives["1.0.0"]) {
		t.Fatalf("exact version: %v, %v", exact, err)
	}
	if count.get("GET tags") != 0 {
		t.Fatalf("an exact version listed tags: %v", count.counts)
	}

	// A chart of the repository whose Chart.lock pins a dependency in the
	// registry gets it from there, through the same cache.
	parent := parentChart("parent", "oci://"+host+"/charts", true, nil)
	parent["Chart.yaml"] = strings.ReplaceAll(parent["Chart.yaml"], "name: sub", "name: demo")
	parent["Chart.lock"] = strings.ReplaceAll(parent["Chart.lock"], "name: sub", "name: demo")
	repo.Add("parent", "1.0.0", helmtest.Package("parent", parent))
	withDep, err := o.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "parent", Repository: repo.URL, Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(withDep.Files["charts/demo-1.0.0.tgz"]) != string(archives["1.0.0"]) {
		t.Fatalf("the dependency from the registry: %v", keys(withDep.Files))
	}

	// A chart the registry does not have names the repository and chart.
	_, err = o.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "nothere", Repository: "oci://" + host + "/charts", Insecure: true}, nil)
	if !errors.Is(err, charts.ErrNotFound) || !strings.Contains(err.Error(), "oci://"+host+"/charts") || !strings.Contains(err.Error(), "nothere") {
		t.Fatalf("missing chart: %v", err)
	}
	t.Logf("missing chart: %v", err)
}

// A registry's own error text is not shown, nor the password: a 401 is
// "unauthorized" naming the repository.
func TestOCIUnauthorized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"password hunter2-secret is wrong"}]}`))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dockerConfig := `{"auths":{"` + host + `":{"username":"robot","password":"hunter2-secret"}}}`
	p := charts.Provider{Fetcher: charts.New(charts.Options{}), Credentials: func(context.Context, v1alpha1.LocalObjectReference) (*charts.Auth, error) {
		return charts.FromSecretData(map[string][]byte{".dockerconfigjson": []byte(dockerConfig)}), nil
	}}
	_, err := p.FetchHelm(context.Background(), "app", v1alpha1.HelmSource{
		Chart: "demo", Version: "1.0.0", Repository: "oci://" + host + "/charts", Insecure: true,
		SecretRef: &v1alpha1.LocalObjectReference{Name: "pull"},
	}, nil)
	if !errors.Is(err, charts.ErrUnauthorized) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "oci://"+host+"/charts") {
		t.Fatalf("got %v", err)
	}
	t.Logf("%v", err)
}

// A registry that asks for credentials gets those of the
// .dockerconfigjson entry of its host (its auth field, as docker login
// writes it).
func TestOCIDockerConfigCredentials(t *testing.T) {
	registry := registrytest.Start(t)
	archive := helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil))
	helmtest.Push(t, registry+"/charts/demo", "1.0.0", archive)
	host, count := authProxy(t, registry, "robot", "pull-pw-1234")
	auth := base64.StdEncoding.EncodeToString([]byte("robot:pull-pw-1234"))
	p := charts.Provider{Fetcher: charts.New(charts.Options{}), Credentials: func(context.Context, v1alpha1.LocalObjectReference) (*charts.Auth, error) {
		return charts.FromSecretData(map[string][]byte{".dockerconfigjson": []byte(`{"auths":{"other.example.com":{"auth":"eDp5"},"` + host + `":{"auth":"` + auth + `"}}}`)}), nil
	}}
	snap, err := p.FetchHelm(context.Background(), "app", v1alpha1.HelmSource{
		Chart: "demo", Version: "^1", Repository: "oci://" + host + "/charts", Insecure: true,
		SecretRef: &v1alpha1.LocalObjectReference{Name: "pull"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Revision != "demo@1.0.0@"+helmtest.Digest(archive) {
		t.Fatalf("revision %s", snap.Revision)
	}
	t.Logf("with credentials: %v", count.counts)
}
