package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeGo stands in for go in PATH: it logs each build to $GO_LOG, creates
// the program it was asked to build (after $GO_SLEEP seconds, when set),
// answers go list with a version, and prints a stage for go run.
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
  [ -z "$GO_SLEEP" ] || sleep "$GO_SLEEP"
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
	t.Setenv("ENVTEST_CACHE", filepath.Join(tree, "cache"))
	return tree
}

// runEnvtest runs the tree's hack/envtest.sh and returns what it built.
func runEnvtest(t *testing.T, tree string) []string {
	t.Helper()
	built, _ := runEnvtestLog(t, tree)
	return built
}

// runEnvtestLog runs the tree's hack/envtest.sh and returns what it built
// and what it said on stderr.
func runEnvtestLog(t *testing.T, tree string) (built []string, stderr string) {
	t.Helper()
	_ = os.Remove(os.Getenv("GO_LOG"))
	cmd := exec.Command(filepath.Join(tree, "hack", "envtest.sh"))
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("envtest.sh: %v: %s", err, errBuf.String())
	}
	if got, want := strings.TrimSpace(string(out)), filepath.Join(tree, "bin", "envtest"); got != want {
		t.Errorf("envtest.sh printed %q, want %q", got, want)
	}
	raw, err := os.ReadFile(os.Getenv("GO_LOG"))
	if os.IsNotExist(err) {
		return nil, errBuf.String()
	} else if err != nil {
		t.Fatal(err)
	}
	built = strings.Fields(strings.ReplaceAll(string(raw), "build ", ""))
	slices.Sort(built)
	return built, errBuf.String()
}

// appendTo adds a line to a file of the tree, which changes its stamp.
func appendTo(t *testing.T, file string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("// changed\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A build says which program it builds, how long it has been at it while
// it runs (a cold build of kube-apiserver was silent for 26 minutes) and
// what it took; and the script ends when the build does: no ticker or
// sleep of its own outlives it holding stderr, which a caller such as
// `make demo 2>&1 | tee` reads to its end.
func TestEnvtestShowsProgress(t *testing.T) {
	tree := envtestTree(t)
	if got := runEnvtest(t, tree); len(got) != 4 {
		t.Fatalf("the first run built %v, want all four", got)
	}

	scheduler := filepath.Join(tree, "hack", "tools", "kube-apiserver", "kube-scheduler", "main.go")
	appendTo(t, scheduler)
	t.Setenv("GO_SLEEP", "3")
	t.Setenv("ENVTEST_PROGRESS_EVERY", "1")
	built, log := runEnvtestLog(t, tree)
	if !slices.Equal(built, []string{"kube-scheduler"}) {
		t.Fatalf("built %v, want kube-scheduler", built)
	}
	for _, re := range []string{
		`(?m)^envtest: building kube-scheduler \(cold: [^)]*\)$`,
		`(?m)^envtest: building kube-scheduler \.\.\. [0-9]+s$`,
		`(?m)^envtest: built kube-scheduler in [0-9]+s$`,
	} {
		if !regexp.MustCompile(re).MatchString(log) {
			t.Errorf("stderr does not match %s:\n%s", re, log)
		}
	}

	// A ticker that is not stopped, or whose sleep is left behind, keeps
	// stderr open for a whole interval after the build.
	appendTo(t, scheduler)
	t.Setenv("GO_SLEEP", "")
	t.Setenv("ENVTEST_PROGRESS_EVERY", "120")
	start := time.Now()
	if built, log := runEnvtestLog(t, tree); !slices.Equal(built, []string{"kube-scheduler"}) {
		t.Fatalf("built %v, want kube-scheduler:\n%s", built, log)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("envtest.sh took %s for a build of no time: something held its stderr", took)
	}
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

	appendTo(t, filepath.Join(tree, "hack", "tools", "kube-apiserver", "kube-scheduler", "main.go"))
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

// A new clone (a tree whose bin/ is empty) takes the programs an earlier
// one built from the same sources out of ENVTEST_CACHE and builds none;
// a program whose sources differ is built, and replaces its earlier one
// in the cache. With ENVTEST_CACHE empty nothing is kept.
func TestEnvtestTakesFromCache(t *testing.T) {
	first := envtestTree(t)
	cache := filepath.Join(first, "cache")
	all := []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
	if got := runEnvtest(t, first); !slices.Equal(got, all) {
		t.Fatalf("the first run built %v, want %v", got, all)
	}

	second := envtestTree(t)
	t.Setenv("ENVTEST_CACHE", cache)
	built, log := runEnvtestLog(t, second)
	if len(built) != 0 {
		t.Fatalf("a new tree with the same sources built %v, want nothing:\n%s", built, log)
	}
	for _, name := range append(all, "kwok.yaml") {
		want, err := os.ReadFile(filepath.Join(first, "bin", "envtest", name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(second, "bin", "envtest", name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s in the new tree: %q (%v), want the first tree's %q", name, got, err, want)
		}
	}
	if !strings.Contains(log, "envtest: took kube-apiserver from "+cache) {
		t.Errorf("stderr does not say where kube-apiserver came from:\n%s", log)
	}
	if got := runEnvtest(t, second); len(got) != 0 {
		t.Fatalf("a second run of the new tree built %v, want nothing (the stamps written)", got)
	}

	appendTo(t, filepath.Join(second, "hack", "tools", "kube-apiserver", "kube-scheduler", "main.go"))
	if got := runEnvtest(t, second); !slices.Equal(got, []string{"kube-scheduler"}) {
		t.Fatalf("after changing kube-scheduler's main.go, built %v, want kube-scheduler", got)
	}
	kept, err := filepath.Glob(filepath.Join(cache, "kube-scheduler-*"))
	if err != nil || len(kept) != 1 {
		t.Errorf("the cache holds %v (%v) for kube-scheduler, want its last build only", kept, err)
	}

	// Programs built before there was a cache (a bin/ of an earlier
	// version of the script) are kept at the next run, which builds
	// nothing.
	later := filepath.Join(t.TempDir(), "cache")
	t.Setenv("ENVTEST_CACHE", later)
	if got := runEnvtest(t, first); len(got) != 0 {
		t.Fatalf("a run of a built tree with an empty cache built %v, want nothing", got)
	}
	for _, name := range all {
		if kept, err := filepath.Glob(filepath.Join(later, name+"-*", name)); err != nil || len(kept) != 1 {
			t.Errorf("the empty cache holds %v (%v) for %s after a run, want the tree's program", kept, err, name)
		}
	}

	third := envtestTree(t)
	t.Setenv("ENVTEST_CACHE", "")
	if got := runEnvtest(t, third); !slices.Equal(got, all) {
		t.Fatalf("without a cache, a new tree built %v, want %v", got, all)
	}
	if _, err := os.Stat(filepath.Join(third, "cache")); !os.IsNotExist(err) {
		t.Errorf("with ENVTEST_CACHE empty, the script kept programs: %v", err)
	}
}
