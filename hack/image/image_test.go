package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/engine/worker"
)

func testMeta() Meta {
	return Meta{
		Version:  "v0.0.1-test",
		Commit:   "0123456789abcdef0123456789abcdef01234567",
		Created:  time.Unix(1764000000, 0).UTC(),
		Source:   defaultSource,
		Licenses: "NOASSERTION",
	}
}

// fakeBinaries writes a directory of two small files per platform in
// place of the engine and its worker.
func fakeBinaries(t *testing.T, plats []v1.Platform) map[string]string {
	t.Helper()
	dir := t.TempDir()
	bins := map[string]string{}
	for _, p := range plats {
		d := filepath.Join(dir, p.Architecture)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{engineFile, workerFile} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(f+" for "+p.String()), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		bins[p.String()] = d
	}
	return bins
}

func mustPlatforms(t *testing.T) []v1.Platform {
	t.Helper()
	plats, err := parsePlatforms("linux/amd64,linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	return plats
}

// buildLayout assembles the image from scratch, writes it as a layout
// into a new directory and reads its index's digest back from there.
func buildLayout(t *testing.T, m Meta, b Base, plats []v1.Platform, bins map[string]string) (string, v1.Hash) {
	t.Helper()
	idx, err := assemble(m, b, plats, bins)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dir, idx, m.Version); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("layout directory %s: %v %v, want mode 0755", dir, fi, err)
	}
	back, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := back.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dir, d
}

// layoutDigest builds a layout of fake binaries and returns its digest
// and its index.json.
func layoutDigest(t *testing.T, m Meta, bins map[string]string) (v1.Hash, []byte) {
	t.Helper()
	dir, d := buildLayout(t, m, Base{CACerts: []byte("CA")}, mustPlatforms(t), bins)
	top, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	return d, top
}

// TestAssembleReproducible: two assemblies of the same inputs write the
// same layout; another commit time or another binary gives another digest.
func TestAssembleReproducible(t *testing.T) {
	m := testMeta()
	bins := fakeBinaries(t, mustPlatforms(t))
	d1, top1 := layoutDigest(t, m, bins)
	d2, top2 := layoutDigest(t, m, bins)
	if d1 != d2 || !bytes.Equal(top1, top2) {
		t.Fatalf("two assemblies differ: %s and %s\n%s\n%s", d1, d2, top1, top2)
	}

	later := m
	later.Created = later.Created.Add(time.Second)
	if d, _ := layoutDigest(t, later, bins); d == d1 {
		t.Errorf("another commit time gives the same digest %s", d)
	}
	if err := os.WriteFile(filepath.Join(bins["linux/arm64"], workerFile), []byte("another worker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d, _ := layoutDigest(t, m, bins); d == d1 {
		t.Errorf("another binary gives the same digest %s", d)
	}
}

// TestAssembleConfig: each platform's image runs /engine as 65532 with the
// OCI labels, in OCI media types, and shares the base layer.
func TestAssembleConfig(t *testing.T) {
	m := testMeta()
	plats := mustPlatforms(t)
	idx, err := assemble(m, Base{CACerts: []byte("CA")}, plats, fakeBinaries(t, plats))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || len(im.Manifests) != 2 {
		t.Fatalf("index: media type %s, %d manifests", im.MediaType, len(im.Manifests))
	}
	if got := im.Annotations["org.opencontainers.image.revision"]; got != m.Commit {
		t.Errorf("index revision annotation %q, want %q", got, m.Commit)
	}
	var baseDigests []v1.Hash
	for i, desc := range im.Manifests {
		if desc.Platform == nil || !desc.Platform.Equals(plats[i]) {
			t.Errorf("manifest %d: platform %v, want %s", i, desc.Platform, plats[i])
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type %s", plats[i], mt)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != plats[i].OS || cf.Architecture != plats[i].Architecture {
			t.Errorf("%s: config platform %s/%s", plats[i], cf.OS, cf.Architecture)
		}
		if !cf.Created.Time.Equal(m.Created) {
			t.Errorf("%s: created %v, want %v", plats[i], cf.Created, m.Created)
		}
		if cf.Config.User != "65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/engine"}) {
			t.Errorf("%s: user %q entrypoint %q, want 65532 [/engine]", plats[i], cf.Config.User, cf.Config.Entrypoint)
		}
		if !slices.Contains(cf.Config.Env, "MANIFESTSYNC_EVAL_WORKER=/engine-worker") {
			t.Errorf("%s: env %q: the engine would start its workers as itself, not /engine-worker", plats[i], cf.Config.Env)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.source":   m.Source,
			"org.opencontainers.image.revision": m.Commit,
			"org.opencontainers.image.version":  m.Version,
			"org.opencontainers.image.licenses": m.Licenses,
		} {
			if got := cf.Config.Labels[k]; got != want {
				t.Errorf("%s: label %s = %q, want %q", plats[i], k, got, want)
			}
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want base and engine", plats[i], len(layers))
		}
		for _, l := range layers {
			if mt, _ := l.MediaType(); mt != types.OCILayer {
				t.Errorf("%s: layer media type %s", plats[i], mt)
			}
		}
		d, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		baseDigests = append(baseDigests, d)
	}
	if baseDigests[0] != baseDigests[1] {
		t.Errorf("the platforms' base layers differ: %v", baseDigests)
	}
}

func TestParsePlatforms(t *testing.T) {
	for _, bad := range []string{"", "linux", "linux/amd64,linux/amd64", "linux/amd64,"} {
		if _, err := parsePlatforms(bad); err == nil {
			t.Errorf("parsePlatforms(%q): no error", bad)
		}
	}
}

// TestProgress: a long build says every period that it still runs, with
// the time so far, and nothing once it is stopped.
func TestProgress(t *testing.T) {
	var out gittest.Buffer // safe for the ticker writing and the test reading
	stop := progress(&out, "engine for linux/arm64", time.Now().Add(-90*time.Second), 5*time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); strings.Count(out.String(), "\n") < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no progress lines after 10s: %q", out.String())
		}
	}
	stop()
	said := out.String()
	first, _, _ := strings.Cut(said, "\n")
	if !strings.HasPrefix(first, "image: still building engine for linux/arm64 (1m3") {
		t.Errorf("progress line %q, want the build and the time since it started", first)
	}
	time.Sleep(20 * time.Millisecond)
	if out.String() != said {
		t.Errorf("progress printed after it was stopped: %q", strings.TrimPrefix(out.String(), said))
	}
}

// TestCompileUsage: compile takes flags only, and is listed in the usage.
func TestCompileUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"compile", "extra"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `compile takes no arguments, got ["extra"]`) {
		t.Errorf("compile extra: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"compile", "-platforms", "linux"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `platform "linux"`) {
		t.Errorf("compile -platforms linux: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run(t.Context(), nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "image compile [-o DIR] [-platforms LIST]") {
		t.Errorf("no arguments: exit %d, usage %q", code, stderr.String())
	}
}

// The image names its worker in the variable the pool reads.
func TestWorkerEnv(t *testing.T) {
	if workerEnv != worker.CommandEnv {
		t.Errorf("the image sets %q, the pool reads %q", workerEnv, worker.CommandEnv)
	}
}

// compile -o keeps the programs of the platforms it builds (so that go
// build finds them up to date) and removes whatever else the directory
// holds: a platform left out must not be found there.
func TestKeepOnly(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"linux-amd64", "linux-arm64", "linux-s390x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, engineFile), []byte("old"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := keepOnly(dir, mustPlatforms(t)); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, []string{"linux-amd64", "linux-arm64"}) {
		t.Errorf("after keepOnly: %v, want linux-amd64 and linux-arm64", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "linux-amd64", engineFile)); err != nil || string(b) != "old" {
		t.Errorf("a kept platform's program: %q %v, want it untouched", b, err)
	}
	if err := keepOnly(filepath.Join(dir, "none"), mustPlatforms(t)); err != nil {
		t.Errorf("keepOnly of a directory that does not exist: %v", err)
	}
}
