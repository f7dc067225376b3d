package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeGo stands in for go in PATH: it logs each build to $GO_LOG, creates
// the program it was asked to build, answers go list with a version, and
// prints a stage for go run.
const fakeGo = `#!/bin/sh
case "$1" in
list) echo v1.37.1 ;;
run) echo "kind: Stage" ;;
build)
  out=""
  prev=""
  for a in "$@"; do
    [ "$prev" = "-o" ] && out="$a"
    prev="$a"
  done
  echo "build $(basename "$out")" >>"$GO_LOG"
  printf '#!/bin/sh\n' >"$out"
  chmod +x "$out" ;;
esac
`

// envtestTree copies hack/envtest.sh and the tools modules it builds from
// into a new tree, with a fake go first in PATH, and returns the tree.
func envtestTree(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	files := []string{
		"hack/envtest.sh",
		"hack/tools/kube-apiserver/go.mod", "hack/tools/kube-apiserver/go.sum", "hack/tools/kube-apiserver/main.go",
		"hack/tools/kube-apiserver/kube-controller-manager/main.go", "hack/tools/kube-apiserver/kube-scheduler/main.go",
		"hack/tools/kwok/go.mod", "hack/tools/kwok/go.sum", "hack/tools/kwok/stages/main.go",
	}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, f), raw, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// etcd is there already: the script must not install it.
	assets := filepath.Join(tree, "bin", "envtest")
	if err := os.MkdirAll(assets, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(assets, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fakeBin := filepath.Join(tree, "fakebin")
	if err := os.MkdirAll(fakeBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fakeBin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fakeBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("GO_LOG", filepath.Join(tree, "go.log"))
	return tree
}

// runEnvtest runs the tree's hack/envtest.sh and returns what it built.
func runEnvtest(t *testing.T, tree string) []string {
	t.Helper()
	_ = os.Remove(os.Getenv("GO_LOG"))
	cmd := exec.Command(filepath.Join(tree, "hack", "envtest.sh"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("envtest.sh: %v: %s", err, err.(*exec.ExitError).Stderr)
	}
	if got, want := strings.TrimSpace(string(out)), filepath.Join(tree, "bin", "envtest"); got != want {
		t.Errorf("envtest.sh printed %q, want %q", got, want)
	}
	raw, err := os.ReadFile(os.Getenv("GO_LOG"))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	built := strings.Fields(strings.ReplaceAll(string(raw), "build ", ""))
	slices.Sort(built)
	return built
}

// hack/envtest.sh rebuilds a program when what it is built from changes,
// and only then: a go.mod newer than the program (as in a fresh clone or
// worktree) but unchanged rebuilds nothing.
func TestEnvtestRebuildsOnlyWhatChanged(t *testing.T) {
	tree := envtestTree(t)
	all := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
	if got := runEnvtest(t, tree); !slices.Equal(got, all) {
		t.Fatalf("the first run built %v, want %v", got, all)
	}
	if _, err := os.Stat(filepath.Join(tree, "bin", "envtest", "kwok.yaml")); err != nil {
		t.Errorf("no kwok.yaml: %v", err)
	}
	if got := runEnvtest(t, tree); len(got) != 0 {
		t.Fatalf("a second run built %v, want nothing", got)
	}

	later := time.Now().Add(time.Hour)
	for _, mod := range []string{"kube-apiserver", "kwok"} {
		for _, f := range []string{"go.mod", "go.sum"} {
			if err := os.Chtimes(filepath.Join(tree, "hack", "tools", mod, f), later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := runEnvtest(t, tree); len(got) != 0 {
		t.Fatalf("after touching go.mod, envtest.sh built %v, want nothing", got)
	}

	main := filepath.Join(tree, "hack", "tools", "kube-apiserver", "kube-scheduler", "main.go")
	f, err := os.OpenFile(main, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("// changed\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := runEnvtest(t, tree); !slices.Equal(got, []string{"kube-scheduler"}) {
		t.Fatalf("after changing kube-scheduler's main.go, envtest.sh built %v, want kube-scheduler", got)
	}

	gomod := filepath.Join(tree, "hack", "tools", "kube-apiserver", "go.mod")
	raw, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gomod, append(raw, "// changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	if got := runEnvtest(t, tree); !slices.Equal(got, want) {
		t.Fatalf("after changing the kube-apiserver module's go.mod, envtest.sh built %v, want %v", got, want)
	}
}
