package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/manifestsync/manifestsync/internal/enginebuild"
	"github.com/manifestsync/manifestsync/internal/registrytest"
)

// TestImageReproduciblePushedRuns is `make image` end to end: the engine
// is built for both platforms, the image assembled twice from scratch
// (same digest), pushed to Debian's docker-registry on 127.0.0.1, pulled
// back by digest, this machine's platform unpacked into a directory, and
// `chroot DIR /engine version` prints the commit.
func TestImageReproduciblePushedRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the engine for two platforms")
	}
	registrytest.Path(t) // before the builds: fail at once without it
	ctx := t.Context()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	m, err := gitMeta(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	m.Source, m.Licenses = defaultSource, "NOASSERTION"
	plats := mustPlatforms(t)
	bins := map[string]string{}
	if kept := os.Getenv(enginebuild.ProgramsEnv); kept != "" {
		// make test's `image compile -o` built them from this tree a
		// moment ago, as compileEngine does; the version checks below
		// fail if they are of another commit.
		for _, p := range plats {
			bins[p.String()] = filepath.Join(kept, p.OS+"-"+p.Architecture)
		}
	} else {
		binDir := t.TempDir()
		for _, p := range plats {
			bins[p.String()] = filepath.Join(binDir, p.Architecture)
			if err := compileEngine(ctx, root, p, m, bins[p.String()]); err != nil {
				t.Fatal(err)
			}
		}
	}
	base, err := loadBase(defaultCABundle)
	if err != nil {
		t.Fatal(err)
	}

	var layouts []string
	var digests []v1.Hash
	for range 2 {
		dir, d := buildLayout(t, m, base, plats, bins)
		layouts, digests = append(layouts, dir), append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of commit %s: %s and %s", m.Commit, digests[0], digests[1])
	}
	t.Logf("index %s (version %s)", digests[0], m.Version)

	addr := registrytest.Start(t)
	_, pushed, err := push(ctx, layouts[1], addr+"/manifestsync/engine:test")
	if err != nil {
		t.Fatal(err)
	}
	if pushed != digests[0] {
		t.Fatalf("pushed %s, built %s", pushed, digests[0])
	}
	ref, err := name.ParseReference(addr + "/manifestsync/engine@" + pushed.String())
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if d, err := pulled.Digest(); err != nil || d != pushed {
		t.Fatalf("pulled %s (%v), pushed %s", d, err, pushed)
	}
	for _, p := range plats {
		if _, err := platformOf(pulled, p.OS, p.Architecture); err != nil {
			t.Error(err)
		}
	}
	img, err := platformOf(pulled, "linux", runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/engine"}) ||
		cf.Config.Labels["org.opencontainers.image.revision"] != m.Commit {
		t.Errorf("pulled config: user %q entrypoint %q labels %v", cf.Config.User, cf.Config.Entrypoint, cf.Config.Labels)
	}

	rootfs := t.TempDir()
	unpack(t, img, rootfs)
	ca, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil || !bytes.Equal(ca, base.CACerts) {
		t.Errorf("unpacked CA bundle is not Debian's (%v)", err)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("unpacked /tmp: %v %v, want drwxrwxrwt", fi, err)
	}

	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "chroot", rootfs, "/engine", "version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "Operation not permitted") {
			t.Skipf("chroot is not permitted here, so the unpacked image's engine cannot run: %s", strings.TrimSpace(stderr.String()))
		}
		t.Fatalf("chroot %s /engine version: %v\n%s%s", rootfs, err, stdout.String(), stderr.String())
	}
	want := "engine " + m.Version + " commit " + m.Commit + " "
	if !strings.HasPrefix(stdout.String(), want) {
		t.Errorf("chroot DIR /engine version = %q, want it to start with %q", stdout.String(), want)
	}

	// An evaluation by the image's engine runs in the image's worker, as
	// the image's environment names it (outside the chroot, which has no
	// /proc for the worker to watch its memory in; a pod has one): and
	// only there, since a worker that is not there fails it.
	sync := `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: app, namespace: team}
spec:
  params: {v: in-the-image}
  transform:
    starlark:
      inline: |
        def main(ctx):
            return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"v": ctx.params["v"]}}]
  targets: [{name: here, namespace: team}]
`
	syncFile := filepath.Join(t.TempDir(), "sync.yaml")
	if err := os.WriteFile(syncFile, []byte(sync), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, e := range cf.Config.Env {
		if v, ok := strings.CutPrefix(e, workerEnv+"="); ok {
			e = workerEnv + "=" + filepath.Join(rootfs, v)
		}
		env = append(env, e)
	}
	if !slices.Contains(env, workerEnv+"="+filepath.Join(rootfs, workerPath)) {
		t.Fatalf("the image's environment %q names no worker", cf.Config.Env)
	}
	cmd = exec.CommandContext(ctx, filepath.Join(rootfs, enginePath), "eval", "-f", syncFile)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "in-the-image") {
		t.Fatalf("the image's engine eval: %v\n%s", err, out)
	}
	// Without the variable, the lean engine starts the engine-worker
	// beside it.
	cmd = exec.CommandContext(ctx, filepath.Join(rootfs, enginePath), "eval", "-f", syncFile)
	cmd.Env = slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, workerEnv+"=") })
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "in-the-image") {
		t.Fatalf("the image's engine eval without %s: %v\n%s", workerEnv, err, out)
	}
	cmd = exec.CommandContext(ctx, filepath.Join(rootfs, enginePath), "eval", "-f", syncFile)
	cmd.Env = append(env, workerEnv+"="+filepath.Join(rootfs, "none"))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), workerEnv) {
		t.Errorf("the image's engine eval with %s naming nothing: %v, want a failure naming it:\n%s", workerEnv, err, out)
	}
	// The image's engine is the lean one (no evaluator linked), its
	// worker the full evaluators.
	for bin, want := range map[string]bool{enginePath: true, workerPath: false} {
		out, err := exec.CommandContext(ctx, "go", "version", "-m", filepath.Join(rootfs, bin)).Output()
		if err != nil {
			t.Fatalf("go version -m %s: %v", bin, err)
		}
		if lean := strings.Contains(string(out), enginebuild.LeanTag); lean != want {
			t.Errorf("%s built with the tag %s: %v, want %v:\n%s", bin, enginebuild.LeanTag, lean, want, out)
		}
	}
	stdout.Reset()
	cmd = exec.CommandContext(ctx, "chroot", rootfs, "/engine-worker", "version")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || !strings.HasPrefix(stdout.String(), "engine-worker "+m.Version+" commit "+m.Commit+" ") {
		t.Errorf("chroot DIR /engine-worker version = %q (%v), want the engine's version and commit", stdout.String(), err)
	}
}

// platformOf finds the image of one platform in an index.
func platformOf(idx v1.ImageIndex, goos, goarch string) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, desc := range im.Manifests {
		if desc.Platform != nil && desc.Platform.OS == goos && desc.Platform.Architecture == goarch {
			return idx.Image(desc.Digest)
		}
	}
	return nil, fmt.Errorf("no %s/%s image in the index", goos, goarch)
}

// unpack writes the image's flattened file system into dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, data, 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err := os.Chmod(target, mode&(os.ModePerm|os.ModeSticky)); err != nil {
			t.Fatal(err)
		}
	}
}
