package enginebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine/worker"
)

// The engine as built links no Go plugin support, and the tag is what
// keeps it out: should kustomize rename its tag, the second check fails.
func TestNoGoPluginSupport(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	deps := func(tags ...string) []string {
		args := append([]string{"list", "-deps"}, tags...)
		cmd := exec.Command("go", append(args, "./cmd/engine")...)
		cmd.Dir = root
		cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	if slices.Contains(deps("-tags", Tags), "plugin") {
		t.Errorf("./cmd/engine built with -tags %s links the package plugin", Tags)
	}
	if !slices.Contains(deps(), "plugin") {
		t.Errorf("./cmd/engine links no package plugin without -tags %s: the tag is stale", Tags)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n\tCGO_ENABLED=0 $(GO) build -trimpath -tags $(ENGINE_TAGS) -o $(BIN)/engine ./cmd/engine\n", "\nENGINE_TAGS = " + Tags + "\n"} {
		if !strings.Contains(string(makefile), want) {
			t.Errorf("the Makefile builds bin/engine otherwise: it lacks %q", want)
		}
	}
	cmd := Command(context.Background(), root, "/bin/out")
	if !slices.Contains(cmd.Env, "CGO_ENABLED=0") || !slices.Contains(cmd.Args, Tags) || cmd.Args[len(cmd.Args)-1] != "./cmd/engine" {
		t.Errorf("Command: %v %v", cmd.Env[len(cmd.Env)-1], cmd.Args)
	}
}

// WorkerEnv is the variable the pool reads.
func TestWorkerEnv(t *testing.T) {
	if WorkerEnv != worker.CommandEnv {
		t.Errorf("WorkerEnv %q, the pool reads %q", WorkerEnv, worker.CommandEnv)
	}
}

// The image's engine (LeanTag) links no evaluator: no CUE, nothing of
// kustomize (neither its build nor its strategic-merge patches), no Helm
// template engine; its worker links all three, and so does the full
// engine. Without the tag, the packages that wrap them would be linked
// and initialised at every operator's start.
func TestLeanEngineLinksNoEvaluator(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	heavy := []string{"cuelang.org/go/cue", "sigs.k8s.io/kustomize/api/krusty", "sigs.k8s.io/kustomize/kyaml/yaml", "helm.sh/helm/v4/pkg/engine"}
	for _, c := range []struct {
		pkg, tags string
		linked    bool
	}{
		{"./cmd/engine", Tags + "," + LeanTag, false},
		{"./cmd/engine-worker", Tags, true},
		{"./cmd/engine", Tags, true},
	} {
		cmd := exec.Command("go", "list", "-deps", "-tags", c.tags, c.pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags %s %s: %v", c.tags, c.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, h := range heavy {
			if slices.Contains(deps, h) != c.linked {
				t.Errorf("%s with -tags %s: links %s = %v, want %v", c.pkg, c.tags, h, !c.linked, c.linked)
			}
		}
	}
}

// Image builds the lean engine and its worker side by side, and the
// engine evaluates in that worker: a transform's output comes back, and
// without the worker beside it the engine says what is missing.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the engine and its worker")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	engine, err := Image(context.Background(), root, out)
	if err != nil {
		t.Fatal(err)
	}
	if engine != filepath.Join(out, "engine") {
		t.Errorf("engine at %s", engine)
	}
	dir := t.TempDir()
	sync := `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: app, namespace: team}
spec:
  transform:
    starlark:
      inline: |
        def main(ctx):
            return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-the-worker"}}]
  schemas: [{builtin: k8s}]
  targets: [{name: here, namespace: team}]
`
	if err := os.WriteFile(filepath.Join(dir, "sync.yaml"), []byte(sync), 0o644); err != nil {
		t.Fatal(err)
	}
	eval := exec.Command(engine, "eval", "-f", filepath.Join(dir, "sync.yaml"))
	eval.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, WorkerEnv+"=") })
	if b, err := eval.CombinedOutput(); err != nil || !strings.Contains(string(b), "from-the-worker") {
		t.Fatalf("the lean engine's eval: %v\n%s", err, b)
	}
	if err := os.Remove(filepath.Join(out, "engine-worker")); err != nil {
		t.Fatal(err)
	}
	eval = exec.Command(engine, "eval", "-f", filepath.Join(dir, "sync.yaml"))
	eval.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, WorkerEnv+"=") })
	if b, err := eval.CombinedOutput(); err == nil || !strings.Contains(string(b), filepath.Join(out, "engine-worker")) {
		t.Errorf("the lean engine's eval without its worker: %v, want an error naming %s:\n%s", err, filepath.Join(out, "engine-worker"), b)
	}
}

// Under make test (ProgramsEnv) Image copies the programs built before
// the tests and builds nothing; a directory named but lacking one is an
// error that names the variable, not a silent build.
func TestImageTakesPrebuiltPrograms(t *testing.T) {
	kept := t.TempDir()
	plat := filepath.Join(kept, runtime.GOOS+"-"+runtime.GOARCH)
	if err := os.MkdirAll(plat, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plat, "engine"), []byte("prebuilt engine"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ProgramsEnv, kept)
	// Only the engine: the worker is missing.
	if _, err := Image(context.Background(), "/nonexistent", t.TempDir()); err == nil || !strings.Contains(err.Error(), ProgramsEnv) || !strings.Contains(err.Error(), "engine-worker") {
		t.Fatalf("Image with %s lacking the worker: %v, want an error naming both", ProgramsEnv, err)
	}
	if err := os.WriteFile(filepath.Join(plat, "engine-worker"), []byte("prebuilt worker"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image")
	// dir names no module: a build would fail, a copy does not read it.
	engine, err := Image(context.Background(), "/nonexistent", out)
	if err != nil {
		t.Fatal(err)
	}
	if engine != filepath.Join(out, "engine") {
		t.Errorf("Image returned %s, want %s", engine, filepath.Join(out, "engine"))
	}
	for name, want := range map[string]string{"engine": "prebuilt engine", "engine-worker": "prebuilt worker"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		fi, serr := os.Stat(filepath.Join(out, name))
		if err != nil || serr != nil || string(b) != want || fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("%s: %q %v (%v %v), want an executable copy of %q", name, b, fi.Mode(), err, serr, want)
		}
	}
	t.Setenv(ProgramsEnv, "")
	if dir, err := Programs(); dir != "" || err != nil {
		t.Errorf("Programs without %s: %q %v, want nothing", ProgramsEnv, dir, err)
	}
}
