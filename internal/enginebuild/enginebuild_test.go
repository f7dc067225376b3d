package enginebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
