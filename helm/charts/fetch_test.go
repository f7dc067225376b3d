package charts_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/helm/helmtest"
)

func files(m map[string]string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

func sameFiles(t *testing.T, got map[string][]byte, want map[string]string) {
	t.Helper()
	if !maps.EqualFunc(got, files(want), func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("files:\n%v\nwant:\n%v", keys(got), want)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A repository's index is asked with a conditional request: 100 unchanged
// polls are 100 answers 304, with no index body and no chart; the version
// is the newest the range matches (prereleases left out); a new version
// within the range is picked up at the next poll; a second source of the
// same chart downloads nothing.
func TestRepositoryUnchangedPollsDownloadNothing(t *testing.T) {
	repo := helmtest.NewRepo(t)
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0-rc.1"} {
		repo.Add("demo", v, helmtest.Package("demo", helmtest.Chart("demo", v, nil)))
	}
	want := helmtest.Package("demo", helmtest.Chart("demo", "1.1.0", nil))
	f := charts.New(charts.Options{})
	src := v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL, Insecure: true}
	ctx := context.Background()
	snap, err := f.Fetch(ctx, "app", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wantRev := "demo@1.1.0@" + helmtest.Digest(want); snap.Revision != wantRev {
		t.Fatalf("revision %s, want %s", snap.Revision, wantRev)
	}
	sameFiles(t, snap.Files, helmtest.Chart("demo", "1.1.0", nil))
	if !snap.Time.IsZero() {
		t.Errorf("time %v, want zero", snap.Time)
	}
	for range 100 {
		again, err := f.Fetch(ctx, "app", src, nil)
		if err != nil {
			t.Fatal(err)
		}
		if again.Revision != snap.Revision {
			t.Fatalf("revision moved to %s", again.Revision)
		}
	}
	if b, nm, c := repo.IndexBodies.Load(), repo.NotModified.Load(), repo.Charts.Load(); b != 1 || nm != 100 || c != 1 {
		t.Fatalf("101 polls: %d index bodies, %d answers 304, %d charts; want 1, 100, 1", b, nm, c)
	}
	downloads, hits, bytes, _ := f.Stats()
	t.Logf("101 polls: %d requests (1 index body, 100 answers 304), %d chart download, %d cache hits, %d bytes cached", repo.Requests.Load(), downloads, hits, bytes)

	// Another source of the same chart and range: nothing downloaded.
	other, err := f.Fetch(ctx, "other", src, nil)
	if err != nil || other.Revision != snap.Revision {
		t.Fatalf("other source: %v, %v", other, err)
	}
	if c := repo.Charts.Load(); c != 1 {
		t.Fatalf("%d charts downloaded for a second source, want 1", c)
	}

	repo.Add("demo", "1.2.0", helmtest.Package("demo", helmtest.Chart("demo", "1.2.0", nil)))
	next, err := f.Fetch(ctx, "app", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(next.Revision, "demo@1.2.0@sha256:") {
		t.Fatalf("after 1.2.0 was published: revision %s", next.Revision)
	}
	if b, c := repo.IndexBodies.Load(), repo.Charts.Load(); b != 2 || c != 2 {
		t.Fatalf("after a new version: %d index bodies, %d charts; want 2, 2", b, c)
	}

	// An exact prerelease is found; "no range" is the newest stable.
	pre, err := f.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "demo", Version: "2.0.0-rc.1", Repository: repo.URL, Insecure: true}, nil)
	if err != nil || !strings.HasPrefix(pre.Revision, "demo@2.0.0-rc.1@") {
		t.Fatalf("exact prerelease: %v, %v", pre, err)
	}
	newest, err := f.Fetch(ctx, "app", v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true}, nil)
	if err != nil || !strings.HasPrefix(newest.Revision, "demo@1.2.0@") {
		t.Fatalf("no range: %v, %v", newest, err)
	}
}

// The CLI's cache on disk serves a second process (a new Fetcher): the
// index is asked with the validators kept, and a chart the index gives
// the digest of is read from disk. One it gives no digest of is
// downloaded once per process: while the index is unchanged, the digest
// of its bytes stands in.
func TestDiskCacheServesTheNextProcess(t *testing.T) {
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	repo.AddWithoutDigest("plain", "1.0.0", helmtest.Package("plain", helmtest.Chart("plain", "1.0.0", nil)))
	dir := t.TempDir()
	demo := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true}
	plain := v1alpha1.HelmSource{Chart: "plain", Repository: repo.URL, Insecure: true}
	poll := func(f *charts.Fetcher, src v1alpha1.HelmSource) string {
		t.Helper()
		snap, err := f.Fetch(context.Background(), "app", src, nil)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Revision
	}
	one := charts.New(charts.Options{CacheDir: dir})
	first := []string{poll(one, demo), poll(one, plain), poll(one, demo), poll(one, plain)}
	if c := repo.Charts.Load(); c != 2 || first[0] != first[2] || first[1] != first[3] {
		t.Fatalf("one process, two polls of two charts: %d archives downloaded (want 2), revisions %v", c, first)
	}
	two := charts.New(charts.Options{CacheDir: dir})
	if poll(two, demo) != first[0] || poll(two, plain) != first[1] {
		t.Fatal("the next process got other revisions")
	}
	if b, nm, c := repo.IndexBodies.Load(), repo.NotModified.Load(), repo.Charts.Load(); b != 1 || nm != 5 || c != 3 {
		t.Fatalf("%d index bodies, %d answers 304, %d archives; want 1, 5, 3 (plain once more)", b, nm, c)
	}
}

// Credentials go as basic auth; a wrong password is "unauthorized" naming
// the repository, and neither password shows, nor the server's page.
func TestRepositoryCredentials(t *testing.T) {
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	repo.RequireAuth("robot", "right-password-123")
	f := charts.New(charts.Options{})
	src := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "creds"}}
	creds := func(secret map[string][]byte) charts.Credentials {
		return func(context.Context, v1alpha1.LocalObjectReference) (*charts.Auth, error) {
			return charts.FromSecretData(secret), nil
		}
	}
	p := charts.Provider{Fetcher: f, Credentials: creds(map[string][]byte{"username": []byte("robot"), "password": []byte("right-password-123")})}
	if _, err := p.FetchHelm(context.Background(), "app", src, nil); err != nil {
		t.Fatal(err)
	}
	p.Credentials = creds(map[string][]byte{"username": []byte("robot"), "password": []byte("wrong-password-456")})
	_, err := p.FetchHelm(context.Background(), "app", src, nil)
	if !errors.Is(err, charts.ErrUnauthorized) {
		t.Fatalf("wrong password: %v, want unauthorized", err)
	}
	msg := err.Error()
	t.Logf("a wrong password: %s", msg)
	for _, leak := range []string{"right-password-123", "wrong-password-456", "no entry"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error shows %q: %s", leak, msg)
		}
	}
	if !strings.Contains(msg, repo.URL) || !strings.Contains(msg, `source "app"`) || !strings.Contains(msg, "demo") {
		t.Errorf("error does not name the source, chart and repository: %s", msg)
	}
	// No credentials over plain http to a host other than loopback.
	_, err = p.FetchHelm(context.Background(), "app", v1alpha1.HelmSource{Chart: "demo", Repository: "http://charts.example.com", Insecure: true, SecretRef: src.SecretRef}, nil)
	if err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Fatalf("credentials over plain http: %v", err)
	}
}

// What a hostile or broken repository gets: a clear error naming the
// source, chart and repository, and nothing more.
func TestRepositoryRefusals(t *testing.T) {
	ctx := context.Background()
	fetch := func(t *testing.T, opts charts.Options, repo *helmtest.Repo, chart, version string) error {
		t.Helper()
		_, err := charts.New(opts).Fetch(ctx, "app", v1alpha1.HelmSource{Chart: chart, Version: version, Repository: repo.URL, Insecure: true}, nil)
		if err == nil {
			t.Fatal("fetched")
		}
		t.Logf("%s", err)
		if !strings.Contains(err.Error(), repo.URL) || !strings.Contains(err.Error(), chart) {
			t.Errorf("error does not name the repository and chart: %v", err)
		}
		return err
	}
	archive := func(entries ...helmtest.Entry) *helmtest.Repo {
		repo := helmtest.NewRepo(t)
		repo.Add("evil", "1.0.0", helmtest.Archive(append([]helmtest.Entry{
			{Name: "evil/Chart.yaml", Data: "apiVersion: v2\nname: evil\nversion: 1.0.0\n"},
		}, entries...)))
		return repo
	}
	t.Run("escape", func(t *testing.T) {
		err := fetch(t, charts.Options{}, archive(helmtest.Entry{Name: "evil/../../etc/cron.d/x", Data: "x"}), "evil", "")
		if !strings.Contains(err.Error(), "leaves the chart directory") {
			t.Fatal(err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		err := fetch(t, charts.Options{}, archive(helmtest.Entry{Name: "evil/templates/x.yaml", Type: '2', Link: "/etc/passwd"}), "evil", "")
		if !strings.Contains(err.Error(), "a link, refused") {
			t.Fatal(err)
		}
	})
	t.Run("device", func(t *testing.T) {
		err := fetch(t, charts.Options{}, archive(helmtest.Entry{Name: "evil/templates/zero", Type: '3'}), "evil", "")
		if !strings.Contains(err.Error(), "not a regular file") {
			t.Fatal(err)
		}
	})
	t.Run("another directory", func(t *testing.T) {
		err := fetch(t, charts.Options{}, archive(helmtest.Entry{Name: "other/x.yaml", Data: "x"}), "evil", "")
		if !strings.Contains(err.Error(), "outside the chart directory") {
			t.Fatal(err)
		}
	})
	t.Run("not a chart", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		repo.Add("evil", "1.0.0", helmtest.Archive([]helmtest.Entry{{Name: "evil/values.yaml", Data: "a: 1\n"}}))
		if err := fetch(t, charts.Options{}, repo, "evil", ""); !strings.Contains(err.Error(), "not a valid chart") {
			t.Fatal(err)
		}
	})
	t.Run("archive over the limit", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		repo.Add("big", "1.0.0", helmtest.Package("big", helmtest.Chart("big", "1.0.0", map[string]string{"x.txt": randomText(64 << 10)})))
		if err := fetch(t, charts.Options{MaxChartBytes: 16 << 10}, repo, "big", ""); !errors.Is(err, charts.ErrLimit) {
			t.Fatal(err)
		}
	})
	t.Run("unpacked over the limit", func(t *testing.T) {
		repo := helmtest.NewRepo(t) // 8 MiB of zeros: a few kB packed
		repo.Add("bomb", "1.0.0", helmtest.Package("bomb", helmtest.Chart("bomb", "1.0.0", map[string]string{"zeros": strings.Repeat("\x00", 8<<20)})))
		if err := fetch(t, charts.Options{Limits: source.Limits{MaxBytes: 1 << 20}}, repo, "bomb", ""); !errors.Is(err, charts.ErrLimit) {
			t.Fatal(err)
		}
	})
	t.Run("too many files", func(t *testing.T) {
		extra := map[string]string{}
		for i := range 50 {
			extra[fmt.Sprintf("files/%d", i)] = "x"
		}
		repo := helmtest.NewRepo(t)
		repo.Add("many", "1.0.0", helmtest.Package("many", helmtest.Chart("many", "1.0.0", extra)))
		if err := fetch(t, charts.Options{Limits: source.Limits{MaxFiles: 20}}, repo, "many", ""); !errors.Is(err, charts.ErrLimit) {
			t.Fatal(err)
		}
	})
	t.Run("nested archives", func(t *testing.T) {
		inner := helmtest.Package("c", helmtest.Chart("c", "1.0.0", nil))
		for _, n := range []string{"b", "a"} {
			inner = helmtest.Package(n, helmtest.Chart(n, "1.0.0", map[string]string{"charts/x.tgz": string(inner)}))
		}
		repo := helmtest.NewRepo(t)
		repo.Add("a", "1.0.0", inner)
		if err := fetch(t, charts.Options{MaxDepth: 1}, repo, "a", ""); !errors.Is(err, charts.ErrLimit) || !strings.Contains(err.Error(), "nested") {
			t.Fatal(err)
		}
	})
	t.Run("index over the limit", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		for i := range 200 {
			repo.Add("demo", fmt.Sprintf("1.0.%d", i), []byte("x"))
		}
		if err := fetch(t, charts.Options{MaxIndexBytes: 4 << 10}, repo, "demo", ""); !errors.Is(err, charts.ErrLimit) {
			t.Fatal(err)
		}
	})
	t.Run("no such chart", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
		if err := fetch(t, charts.Options{}, repo, "nothere", ""); !errors.Is(err, charts.ErrNotFound) {
			t.Fatal(err)
		}
		if err := fetch(t, charts.Options{}, repo, "demo", "^3"); !errors.Is(err, charts.ErrNotFound) || !strings.Contains(err.Error(), `"^3"`) {
			t.Fatal(err)
		}
	})
	t.Run("not a repository", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		repo.Serve(http.NotFoundHandler())
		if err := fetch(t, charts.Options{}, repo, "demo", ""); !errors.Is(err, charts.ErrNotFound) || !strings.Contains(err.Error(), "index.yaml") {
			t.Fatal(err)
		}
	})
	t.Run("digest mismatch", func(t *testing.T) {
		repo := helmtest.NewRepo(t)
		repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
		repo.Tamper("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", map[string]string{"values.yaml": "greeting: evil\n"})))
		if err := fetch(t, charts.Options{}, repo, "demo", ""); !strings.Contains(err.Error(), "digest") {
			t.Fatal(err)
		}
	})
	t.Run("never answers", func(t *testing.T) {
		repo := hangingRepo(t)
		start := time.Now()
		err := fetch(t, charts.Options{Timeout: time.Second}, repo, "demo", "")
		if took := time.Since(start); !strings.HasSuffix(err.Error(), ": timed out after 1s") || took > 30*time.Second {
			t.Fatalf("after %s: %v", took, err)
		}
	})
}

// With Wait, a caller is not held by a server that does not answer: it
// gets a *source.PendingError whose Done closes when the fetch ends (at
// its Timeout), and the next caller gets the fetch's result.
func TestSlowRepositoryDoesNotHoldTheCaller(t *testing.T) {
	repo := hangingRepo(t)
	f := charts.New(charts.Options{Wait: 100 * time.Millisecond, Timeout: 2 * time.Second})
	src := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true}
	start := time.Now()
	_, err := f.Fetch(context.Background(), "app", src, nil)
	pe, ok := errors.AsType[*source.PendingError](err)
	if !ok {
		t.Fatalf("got %v, want a *source.PendingError", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("held the caller %s", took)
	}
	select {
	case <-pe.Done:
	case <-time.After(30 * time.Second):
		t.Fatal("the fetch did not end by its timeout")
	}
	if _, err := f.Fetch(context.Background(), "app", src, nil); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("after the fetch ended: %v", err)
	}
}

// hangingRepo is a repository that accepts requests and never answers,
// until the client gives up or the test ends.
func hangingRepo(t *testing.T) *helmtest.Repo { return hang(t, helmtest.NewRepo(t)) }

// hang makes repo accept requests and never answer.
func hang(t *testing.T, repo *helmtest.Repo) *helmtest.Repo {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	repo.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	return repo
}

func randomText(n int) string {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = 'a' + byte(x%26)
	}
	return string(b)
}

// While a fetch hangs, a caller gets the source's last snapshot (Pending
// set); once Keep no longer names the chart, that snapshot is let go of
// and the caller gets a *source.PendingError instead.
func TestKeepLetsGoOfLastSnapshots(t *testing.T) {
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	f := charts.New(charts.Options{Wait: 100 * time.Millisecond, Timeout: 2 * time.Second})
	src := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, Insecure: true}
	if _, err := f.Fetch(context.Background(), "app", src, nil); err != nil {
		t.Fatal(err)
	}
	hang(t, repo)
	stale, err := f.Fetch(context.Background(), "app", src, nil)
	if err != nil || stale.Pending == nil || !strings.HasPrefix(stale.Revision, "demo@1.0.0@") {
		t.Fatalf("while the server hangs: %v, %v; want the last snapshot, pending", stale, err)
	}
	f.Keep([]v1alpha1.HelmSource{src}) // still named: kept
	if again, err := f.Fetch(context.Background(), "app", src, nil); err != nil || again.Pending == nil {
		t.Fatalf("kept: %v, %v", again, err)
	}
	f.Keep([]v1alpha1.HelmSource{{Chart: "other", Repository: repo.URL}})
	if _, err := f.Fetch(context.Background(), "app", src, nil); !errors.Is(err, source.ErrPending) {
		t.Fatalf("after Keep without it: %v, want a pending error", err)
	}
}

// A thousand ManifestSyncs of one chart, polling at once (50 at a time),
// download it once: concurrent reads of the same chart, range and
// credentials share one fetch, and the others ask one conditional request.
func TestThousandSourcesDownloadOnce(t *testing.T) {
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	f := charts.New(charts.Options{})
	src := v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL, Insecure: true}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	sem := make(chan struct{}, 50)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := f.Fetch(context.Background(), fmt.Sprintf("ms-%d", i), src, nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	downloads, hits, _, _ := f.Stats()
	t.Logf("1,000 reads in %v: %d requests (%d index bodies, %d answers 304), %d chart download, %d cache hits",
		time.Since(start).Round(time.Millisecond), repo.Requests.Load(), repo.IndexBodies.Load(), repo.NotModified.Load(), downloads, hits)
	if repo.Charts.Load() != 1 || repo.IndexBodies.Load() != 1 || repo.Requests.Load() > 1000 {
		t.Fatalf("1,000 reads: %d charts, %d index bodies, %d requests; want 1, 1, at most 1,000", repo.Charts.Load(), repo.IndexBodies.Load(), repo.Requests.Load())
	}
}

// A repository URL is refused before anything is asked when it is plain
// http without insecure, holds credentials (whose password the error does
// not show), or is of another scheme.
func TestRepositoryURLsRefused(t *testing.T) {
	f := charts.New(charts.Options{})
	for _, c := range []struct{ repo, want string }{
		{"http://charts.example.com", "plain http needs insecure: true"},
		{"https://robot:url-pw-1234@charts.example.com", "credentials in the URL are refused; use secretRef"},
		{"file:///etc", `unsupported scheme "file"`},
	} {
		_, err := f.Fetch(context.Background(), "app", v1alpha1.HelmSource{Chart: "demo", Repository: c.repo}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "url-pw") {
			t.Errorf("%s: %v, want %q", c.repo, err, c.want)
		}
	}
}

// A repository over https whose certificate a private CA signed is trusted
// with the ca.crt of the source's Secret, and refused without it.
func TestRepositoryPrivateCA(t *testing.T) {
	repo, ca := helmtest.NewTLSRepo(t)
	repo.Add("demo", "1.0.0", helmtest.Package("demo", helmtest.Chart("demo", "1.0.0", nil)))
	src := v1alpha1.HelmSource{Chart: "demo", Repository: repo.URL, SecretRef: &v1alpha1.LocalObjectReference{Name: "tls"}}
	provider := func(data map[string][]byte) charts.Provider {
		return charts.Provider{Fetcher: charts.New(charts.Options{}), Credentials: func(context.Context, v1alpha1.LocalObjectReference) (*charts.Auth, error) {
			return charts.FromSecretData(data), nil
		}}
	}
	if _, err := provider(nil).FetchHelm(context.Background(), "app", src, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without ca.crt: %v", err)
	}
	snap, err := provider(map[string][]byte{"ca.crt": ca}).FetchHelm(context.Background(), "app", src, nil)
	if err != nil || !strings.HasPrefix(snap.Revision, "demo@1.0.0@sha256:") {
		t.Fatalf("with ca.crt: %v, %v", snap, err)
	}
	if _, err := provider(map[string][]byte{"ca.crt": []byte("not a certificate")}).FetchHelm(context.Background(), "app", src, nil); err == nil || !strings.Contains(err.Error(), "ca.crt holds no PEM certificate") {
		t.Fatalf("a ca.crt that is none: %v", err)
	}
}
