package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
)

var ctx = context.Background()

// requests counts the requests of the registry's access log after mark
// (a length of the log) by method and kind: "HEAD manifests",
// "GET blobs", "GET tags".
func requests(t *testing.T, r *registrytest.Registry, mark int) map[string]int {
	t.Helper()
	line := regexp.MustCompile(`"(GET|HEAD|PUT|POST|PATCH) /v2/\S+/(manifests|blobs|tags)/`)
	counts := map[string]int{}
	for _, m := range line.FindAllStringSubmatch(r.Log(t)[mark:], -1) {
		counts[m[1]+" "+m[2]]++
	}
	return counts
}

func pushFiles(t *testing.T, host, tag string, files map[string][]byte) string {
	t.Helper()
	d, err := oci.Push(ctx, &oci.Dir{Files: files}, "oci://"+host+"/app:"+tag, oci.PushOptions{Insecure: true, Source: "https://git.example/app", Revision: "main@sha1:abc"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// What engine push writes, engine pull reads back as it was: the files,
// the annotations, the revision TAG@DIGEST (sha256:DIGEST by digest); the
// same directory and created time give the same digest.
func TestPushPullRoundTrip(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	dir := t.TempDir()
	for name, content := range map[string]string{"sync.yaml": "kind: ManifestSync\n", "app/deploy.yaml": "kind: Deployment\n", "hack/run.sh": "#!/bin/sh\n", ".git/HEAD": "ref: main\n", "secret.env": "X=1\n", ".sourceignore": "*.env\n"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "hack/run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := oci.ReadDir(dir, oci.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"sync.yaml": "kind: ManifestSync\n", "app/deploy.yaml": "kind: Deployment\n", "hack/run.sh": "#!/bin/sh\n"}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opts := oci.PushOptions{Insecure: true, Source: "https://git.example/app", Revision: "main@sha1:abc", Created: created}
	digest, err := oci.Push(ctx, d, "oci://"+reg.Addr+"/team/app:v1.0.0", opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := oci.Push(ctx, d, "oci://"+reg.Addr+"/team/app:v1.0.1", opts)
	if err != nil || again != digest {
		t.Fatalf("the same directory pushed again: %s, %v; want %s", again, err, digest)
	}
	c := oci.New(oci.Limits{})
	a, err := c.Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/team/app", Ref: oci.Ref{Tag: "v1.0.0"}, Insecure: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, a.Files, want)
	if a.Revision != "v1.0.0@"+digest || a.Digest != digest || a.Unchanged {
		t.Fatalf("revision %s digest %s unchanged %v; pushed %s", a.Revision, a.Digest, a.Unchanged, digest)
	}
	if a.Annotations[oci.AnnotationSource] != "https://git.example/app" || a.Annotations[oci.AnnotationRevision] != "main@sha1:abc" || a.Annotations[oci.AnnotationCreated] != "2026-01-02T03:04:05Z" {
		t.Fatalf("annotations %v", a.Annotations)
	}
	byDigest, err := c.Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/team/app", Ref: oci.Ref{Digest: digest}, Insecure: true}, "")
	if err != nil || byDigest.Revision != digest {
		t.Fatalf("by digest: %v, %v", byDigest, err)
	}
	sameFiles(t, byDigest.Files, want)
}

// A semver range takes the highest tag it matches (of those semverFilter
// matches), and a new tag in range is found at the next resolve: a
// publisher cannot pin a consumer to an old version, and tags outside the
// range or the filter are never read.
func TestSemverRange(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{})
	digests := map[string]string{}
	for _, tag := range []string{"1.0.0", "1.2.0", "v1.3.0-rc.1", "2.0.0", "latest", "1.1.0-dev"} {
		digests[tag] = pushFiles(t, reg.Addr, tag, map[string][]byte{"v": []byte(tag)})
	}
	c := oci.New(oci.Limits{})
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Ref: oci.Ref{SemVer: ">=1.0.0 <2.0.0"}, Insecure: true}
	r, err := c.Resolve(ctx, src)
	if err != nil || r.Revision != "1.2.0@"+digests["1.2.0"] {
		t.Fatalf("range: %+v, %v", r, err)
	}
	digests["v1.4.0"] = pushFiles(t, reg.Addr, "v1.4.0", map[string][]byte{"v": []byte("1.4.0")})
	a, err := c.Fetch(ctx, src, r.Digest)
	if err != nil || a.Unchanged || a.Revision != "v1.4.0@"+digests["v1.4.0"] || string(a.Files["v"]) != "1.4.0" {
		t.Fatalf("after a new tag in range: %+v, %v", a, err)
	}
	filtered := src
	filtered.Ref.SemVerFilter = `^1\.0`
	if r, err := c.Resolve(ctx, filtered); err != nil || r.Tag != "1.0.0" {
		t.Fatalf("filtered: %+v, %v", r, err)
	}
	none := src
	none.Ref.SemVer = ">=3"
	if _, err := c.Resolve(ctx, none); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("no tag in range: %v", err)
	}
}

// 100 unchanged polls make 100 manifest HEADs and nothing else the
// registry serves (counted from its own access log): a registry pays one
// small request a poll, and no blob is downloaded again.
func TestUnchangedPollsReadNoBlob(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	pushFiles(t, reg.Addr, "1.0.0", map[string][]byte{"a.yaml": []byte("a: 1\n")})
	c := oci.New(oci.Limits{})
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Ref: oci.Ref{Tag: "1.0.0"}, Insecure: true}
	mark := len(reg.Log(t))
	first, err := c.Fetch(ctx, src, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(t, reg, mark); got["GET blobs"] != 1 || got["HEAD manifests"] != 1 || got["GET manifests"] != 1 {
		t.Fatalf("first fetch: %v", got)
	}
	mark = len(reg.Log(t))
	const polls = 100
	for range polls {
		a, err := c.Fetch(ctx, src, first.Digest)
		if err != nil || !a.Unchanged || a.Files != nil || a.Revision != first.Revision {
			t.Fatalf("poll: %+v, %v", a, err)
		}
	}
	got := requests(t, reg, mark)
	t.Logf("%d unchanged polls, from the registry's log: %v", polls, got)
	if got["HEAD manifests"] != polls || got["GET manifests"] != 0 || got["GET blobs"] != 0 || len(got) != 1 {
		t.Fatalf("%d unchanged polls: %v; want one manifest HEAD each and nothing else", polls, got)
	}
}

// A wrong password is an error naming the registry and saying
// unauthorized: the password is in no message, nor the registry's own
// text.
func TestWrongPassword(t *testing.T) {
	const user, password = "robot", "right-pw-5521"
	reg := registrytest.StartWith(t, registrytest.Config{User: user, Password: password})
	config := func(pw string) []byte {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
		return []byte(`{"auths":{"other.example":{"auth":"eDp5"},"` + reg.Addr + `":{"auth":"` + auth + `"}}}`)
	}
	if _, err := oci.Push(ctx, &oci.Dir{Files: map[string][]byte{"a": []byte("a")}}, "oci://"+reg.Addr+"/app:1", oci.PushOptions{Insecure: true, DockerConfigJSON: config(password)}); err != nil {
		t.Fatal(err)
	}
	c := oci.New(oci.Limits{})
	src := oci.Source{URL: "oci://" + reg.Addr + "/app", Ref: oci.Ref{Tag: "1"}, Insecure: true, DockerConfigJSON: config(password)}
	if a, err := c.Fetch(ctx, src, ""); err != nil || string(a.Files["a"]) != "a" {
		t.Fatalf("right password: %v", err)
	}
	src.DockerConfigJSON = config("wrong-pw-7731")
	_, err := c.Fetch(ctx, src, "")
	if !errors.Is(err, oci.ErrUnauthorized) || !strings.Contains(err.Error(), reg.Addr) || strings.Contains(err.Error(), "wrong-pw") || strings.Contains(err.Error(), password) {
		t.Fatalf("wrong password: %v", err)
	}
	t.Logf("wrong password: %v", err)
	_, err = oci.Push(ctx, &oci.Dir{Files: map[string][]byte{"a": []byte("a")}}, "oci://"+reg.Addr+"/app:2", oci.PushOptions{Insecure: true, DockerConfigJSON: config("wrong-pw-7731")})
	if !errors.Is(err, oci.ErrUnauthorized) || strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("push, wrong password: %v", err)
	}
	// Credentials are not sent over plain http to another host.
	_, err = c.Fetch(ctx, oci.Source{URL: "oci://registry.example/app", Ref: oci.Ref{Tag: "1"}, Insecure: true, DockerConfigJSON: []byte(`{"auths":{"registry.example":{"username":"u","password":"p-9911"}}}`)}, "")
	if !errors.Is(err, oci.ErrRefused) || strings.Contains(err.Error(), "p-9911") {
		t.Fatalf("credentials over http to another host: %v", err)
	}
}

// entry is one tar entry of a hand-made archive.
type entry struct {
	hd   tar.Header
	body string
}

func tgz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hd := e.hd
		if hd.Typeflag == tar.TypeReg {
			hd.Size = int64(len(e.body))
		}
		if hd.Mode == 0 {
			hd.Mode = 0o644
		}
		if err := tw.WriteHeader(&hd); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeImage pushes an image made in the test, with go-containerregistry
// only, to HOST/REPO:TAG.
func writeImage(t *testing.T, host, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func fluxImage(t *testing.T, layer []byte) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), oci.FluxConfigMediaType)
	img, err := mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(layer, oci.FluxContentMediaType)})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// A hostile artifact gets an error naming the entry and nothing
// extracted: no file outside the directory (../, an absolute path), no
// link to follow later (symbolic or hard), no device file; and a layer
// declared over the limit is refused before a byte of it is downloaded.
func TestHostileArtifactsRefused(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	ok := entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "ok.yaml"}, body: "a: 1\n"}
	for name, bad := range map[string]entry{
		"dotdot":   {hd: tar.Header{Typeflag: tar.TypeReg, Name: "app/../../etc/cron.d/x"}, body: "x"},
		"absolute": {hd: tar.Header{Typeflag: tar.TypeReg, Name: "/etc/passwd"}, body: "x"},
		"symlink":  {hd: tar.Header{Typeflag: tar.TypeSymlink, Name: "link.yaml", Linkname: "/etc/shadow"}},
		"hardlink": {hd: tar.Header{Typeflag: tar.TypeLink, Name: "hard.yaml", Linkname: "ok.yaml"}},
		"device":   {hd: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Devmajor: 1, Devminor: 3}},
		"fifo":     {hd: tar.Header{Typeflag: tar.TypeFifo, Name: "pipe"}},
	} {
		t.Run(name, func(t *testing.T) {
			writeImage(t, reg.Addr, "hostile:"+name, fluxImage(t, tgz(t, ok, bad)))
			_, err := oci.New(oci.Limits{}).Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/hostile", Ref: oci.Ref{Tag: name}, Insecure: true}, "")
			if !errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad.hd.Name)) {
				t.Fatalf("got %v; want refused, naming %q", err, bad.hd.Name)
			}
			t.Logf("%v", err)
		})
	}
	t.Run("layer over the limit", func(t *testing.T) {
		big := make([]byte, 64<<10) // random: it stays 64 KiB gzipped
		r := rand.NewChaCha8([32]byte{1})
		_, _ = r.Read(big)
		writeImage(t, reg.Addr, "hostile:big", fluxImage(t, tgz(t, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "big"}, body: string(big)})))
		mark := len(reg.Log(t))
		_, err := oci.New(oci.Limits{MaxLayerBytes: 1024}).Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/hostile", Ref: oci.Ref{Tag: "big"}, Insecure: true}, "")
		if !errors.Is(err, oci.ErrLimit) || !strings.Contains(err.Error(), "not downloaded") {
			t.Fatalf("got %v", err)
		}
		if got := requests(t, reg, mark); got["GET blobs"] != 0 {
			t.Fatalf("a layer over the limit was downloaded: %v", got)
		}
		t.Logf("%v", err)
	})
	t.Run("unpacked over the limit", func(t *testing.T) {
		bomb := strings.Repeat("\x00", 1<<20) // gzips to about 1 KiB
		writeImage(t, reg.Addr, "hostile:bomb", fluxImage(t, tgz(t, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "bomb"}, body: bomb})))
		_, err := oci.New(oci.Limits{MaxUnpackedBytes: 64 << 10}).Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/hostile", Ref: oci.Ref{Tag: "bomb"}, Insecure: true}, "")
		if !errors.Is(err, oci.ErrLimit) || !strings.Contains(err.Error(), `"bomb"`) {
			t.Fatalf("got %v", err)
		}
	})
}

// A registry that serves a layer larger than its manifest declares (the
// size in the manifest is the publisher's word) gets it read up to the
// declared size and refused: the limit checked against the descriptor
// holds against what is downloaded.
func TestLyingLayerSizeRefused(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{})
	real := tgz(t, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "a"}, body: strings.Repeat("x", 4096)})
	layer := static.NewLayer(real, oci.FluxContentMediaType)
	repo, err := name.NewRepository(reg.Addr+"/liar", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(repo, layer); err != nil {
		t.Fatal(err)
	}
	cfg := static.NewLayer([]byte("{}"), oci.FluxConfigMediaType)
	if err := remote.WriteLayer(repo, cfg); err != nil {
		t.Fatal(err)
	}
	ld, _ := layer.Digest()
	cd, _ := cfg.Digest()
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: oci.FluxConfigMediaType, Size: 2, Digest: cd},
		Layers: []v1.Descriptor{{MediaType: oci.FluxContentMediaType, Size: 100, Digest: ld}}}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(repo.Tag("1"), rawManifest{raw, types.OCIManifestSchema1}); err != nil {
		t.Fatal(err)
	}
	_, err = oci.New(oci.Limits{}).Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/liar", Ref: oci.Ref{Tag: "1"}, Insecure: true}, "")
	if !errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), "larger than the 100 bytes") {
		t.Fatalf("got %v; want a layer larger than declared refused", err)
	}
	t.Logf("%v", err)
}

type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// What `flux push artifact` publishes is read as it is: Flux's build
// writes directory entries and the files' own modes, a tarball layer of
// Flux's content type under Flux's config, and its annotations; plain
// tar+gzip layers (a Docker manifest with an image layer) read the same,
// and a layerSelector picks a layer by media type, to extract or copy.
func TestFluxLayoutAndLayerSelector(t *testing.T) {
	reg := registrytest.StartWith(t, registrytest.Config{})
	fluxTar := tgz(t,
		entry{hd: tar.Header{Typeflag: tar.TypeDir, Name: ".", Mode: 0o755}}, // the pushed directory itself
		entry{hd: tar.Header{Typeflag: tar.TypeDir, Name: "deploy", Mode: 0o755}},
		entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "deploy/app.yaml", Mode: 0o600}, body: "kind: Deployment\n"},
		entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "./kustomization.yaml"}, body: "resources: [deploy/app.yaml]\n"},
	)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(fluxTar)), nil }, tarball.WithMediaType(oci.FluxContentMediaType))
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), oci.FluxConfigMediaType)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer}); err != nil {
		t.Fatal(err)
	}
	img = mutate.Annotations(img, map[string]string{oci.AnnotationSource: "https://github.com/org/repo", oci.AnnotationRevision: "main@sha1:0123", oci.AnnotationCreated: "2026-11-27T12:00:00Z"}).(v1.Image)
	digest := writeImage(t, reg.Addr, "flux:latest", img)
	c := oci.New(oci.Limits{})
	a, err := c.Fetch(ctx, oci.Source{URL: "oci://" + reg.Addr + "/flux", Insecure: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, a.Files, map[string]string{"deploy/app.yaml": "kind: Deployment\n", "kustomization.yaml": "resources: [deploy/app.yaml]\n"})
	if a.Revision != "latest@"+digest || a.Annotations[oci.AnnotationRevision] != "main@sha1:0123" {
		t.Fatalf("revision %s annotations %v", a.Revision, a.Annotations)
	}

	// A Docker manifest: a README layer of its own type, then plain
	// tar+gzip ones.
	readme := static.NewLayer([]byte("# read me\n"), "text/markdown")
	manifests := static.NewLayer(tgz(t, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "cm.yaml"}, body: "kind: ConfigMap\n"}), types.DockerLayer)
	plain, err := mutate.Append(empty.Image, mutate.Addendum{Layer: readme, Annotations: map[string]string{"org.opencontainers.image.title": "README.md"}}, mutate.Addendum{Layer: manifests})
	if err != nil {
		t.Fatal(err)
	}
	writeImage(t, reg.Addr, "plain:1", plain)
	src := oci.Source{URL: "oci://" + reg.Addr + "/plain", Ref: oci.Ref{Tag: "1"}, Insecure: true, LayerSelector: &oci.LayerSelector{MediaType: string(types.DockerLayer)}}
	if a, err = c.Fetch(ctx, src, ""); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, a.Files, map[string]string{"cm.yaml": "kind: ConfigMap\n"})
	src.LayerSelector = &oci.LayerSelector{MediaType: "text/markdown", Operation: oci.OperationCopy}
	if a, err = c.Fetch(ctx, src, ""); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, a.Files, map[string]string{"README.md": "# read me\n"})
	// Extracting what is not tar+gzip is an error, not files.
	src.LayerSelector.Operation = oci.OperationExtract
	if _, err = c.Fetch(ctx, src, ""); !errors.Is(err, oci.ErrRefused) {
		t.Fatalf("extracting markdown: %v", err)
	}
	src.LayerSelector = &oci.LayerSelector{MediaType: "application/none"}
	if _, err = c.Fetch(ctx, src, ""); !errors.Is(err, oci.ErrNotFound) {
		t.Fatalf("no such layer: %v", err)
	}
}

func sameFiles(t *testing.T, got map[string][]byte, want map[string]string) {
	t.Helper()
	g := map[string]string{}
	for k, v := range got {
		g[k] = string(v)
	}
	if !maps.Equal(g, want) {
		t.Fatalf("files %q, want %q", g, want)
	}
}
