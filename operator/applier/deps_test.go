package applier_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/manifestsync/manifestsync"

// TestDiffAndUIDoNotLinkTheReconciler checks the layout of DESIGN.md §9:
// the applier is a package of its own, so that what `engine diff` and the
// web UI show (the applier's dry run, objdiff's rendering, the UI's
// inspection pages) is built without the reconciler (operator/controller),
// and the applier itself imports neither the reconciler nor a command or
// the UI.
func TestDiffAndUIDoNotLinkTheReconciler(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for pkg, banned := range map[string][]string{
		"operator/applier": {"operator/controller", "cmd/", "ui"},
		"internal/objdiff": {"operator/controller"},
		"ui/inspect":       {"operator/controller"},
		"ui":               {"operator/controller"},
	} {
		out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s: %d packages, want its dependencies", pkg, len(deps))
		}
		for _, dep := range deps {
			rel, ok := strings.CutPrefix(dep, module+"/")
			if !ok || rel == pkg {
				continue
			}
			for _, b := range banned {
				if rel == strings.TrimSuffix(b, "/") || strings.HasPrefix(rel, strings.TrimSuffix(b, "/")+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
