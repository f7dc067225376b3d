package engine_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/manifestsync/manifestsync"

// listedPackage is the part of `go list -json` the dependency checks read.
type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// listPackages runs `go list -deps -json` over the whole module: every
// package of the module and every package they depend on.
func listPackages(t *testing.T) map[string]*listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps,Module", "../...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = &p
	}
	return pkgs
}

// layerOf is the place of a package of this module in DESIGN.md §1's
// direction, schemas, lang <- stdlib <- engine <- operator <- cmd: a
// package may import packages of its own layer or lower ones. The API types
// (api/, at the root as Flux keeps them) are data shared by every layer
// above lang, so they sit with schemas. The packaged sources (oci, httpsrc)
// sit with helm, above the engine whose seams they fill; sops is a leaf the
// engine's decrypter imports. Packages outside the direction (bench, hack,
// examples) give -1.
func layerOf(pkg string) int {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return -1
	}
	for _, l := range []struct {
		dir   string
		layer int
	}{
		{"schemas", 0}, {"lang", 0}, {"api", 0}, {"sops", 0},
		{"stdlib", 1}, {"engine", 2}, {"helm", 3}, {"oci", 3}, {"httpsrc", 3}, {"operator", 3}, {"cmd", 4},
	} {
		if rel == l.dir || strings.HasPrefix(rel, l.dir+"/") {
			return l.layer
		}
	}
	return -1
}

// isCore reports whether pkg belongs to the offline core: lang, stdlib and
// engine, but for the git provider (the one part that may use the
// network). Helm's chart and template packages import client-go, so the
// chart renderer and the chart fetcher live outside the core, in helm/
// (the core reaches them through stdlib.HelmRenderer and the resolver's
// HelmFetcher, which the commands wire).
func isCore(pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	for _, outside := range []string{"engine/source/git"} {
		if rel == outside || strings.HasPrefix(rel, outside+"/") {
			return false
		}
	}
	for _, dir := range []string{"lang", "stdlib", "engine"} {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return true
		}
	}
	return false
}

// networkLibraries are the third-party packages the core reaches that import
// net/http themselves: CUE's module registry client and its OCI and OAuth
// helpers, kustomize's remote loader, OpenAPI and apimachinery utilities.
// The core never calls them to fetch anything; a new entry here must be
// looked at before it is added.
var networkLibraries = []string{
	"cuelang.org/go/",
	"cuelabs.dev/go/oci/",
	"golang.org/x/oauth2",
	"golang.org/x/net/http2",
	"github.com/go-openapi/swag/",
	"github.com/google/gnostic-models/",
	"sigs.k8s.io/kustomize/",
	"k8s.io/apimachinery/pkg/util/",
}

// TestCoreStaysOffline checks DESIGN.md §1: lang, stdlib and engine (but its
// git provider) never depend on a cluster client, and never import net/http,
// neither themselves nor through another package of this module; the
// libraries they use reach net/http only through the known ones above.
func TestCoreStaysOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := listPackages(t)
	ncore := 0
	for path, p := range pkgs {
		if !isCore(path) {
			continue
		}
		ncore++
		if slices.Contains(p.Imports, "net/http") {
			t.Errorf("%s imports net/http", path)
		}
		for _, dep := range p.Deps {
			for _, banned := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"} {
				if dep == banned || strings.HasPrefix(dep, banned+"/") {
					t.Errorf("%s depends on %s", path, dep)
				}
			}
			d := pkgs[dep]
			if d == nil || !slices.Contains(d.Imports, "net/http") {
				continue
			}
			switch {
			case strings.HasPrefix(dep, module+"/"):
				t.Errorf("%s depends on %s, which imports net/http", path, dep)
			case !slices.ContainsFunc(networkLibraries, func(lib string) bool { return strings.HasPrefix(dep, lib) }):
				t.Errorf("%s reaches net/http through %s (not a known library)", path, dep)
			}
		}
	}
	if ncore < 5 {
		t.Fatalf("found %d core packages; the listing is wrong", ncore)
	}
}

// TestLayersPointDown checks the direction of DESIGN.md §1: no package of a
// lower layer imports one of a higher layer.
func TestLayersPointDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	pkgs := listPackages(t)
	checked := 0
	for path, p := range pkgs {
		from := layerOf(path)
		if from < 0 {
			continue
		}
		checked++
		for _, imp := range p.Imports {
			if to := layerOf(imp); to > from {
				t.Errorf("%s imports %s, a higher layer", path, imp)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d packages; the listing is wrong", checked)
	}
}

func TestLayerOf(t *testing.T) {
	for pkg, want := range map[string]int{
		module + "/lang/cue":            0,
		module + "/schemas":             0,
		module + "/api/v1alpha1":        0,
		module + "/stdlib":              1,
		module + "/engine/source/git":   2,
		module + "/helm/charts":         3,
		module + "/operator/controller": 3,
		module + "/cmd/engine":          4,
		module + "/bench/w4":            -1,
		"k8s.io/client-go/rest":         -1,
	} {
		if got := layerOf(pkg); got != want {
			t.Errorf("layerOf(%s) = %d, want %d", pkg, got, want)
		}
	}
	if isCore(module+"/engine/source/git") || isCore(module+"/helm") || isCore(module+"/helm/charts") || !isCore(module+"/engine/source") || isCore(module+"/operator/controller") {
		t.Error("isCore: the git provider, the chart renderer and fetcher are outside the core, engine/source inside, operator outside")
	}
}
