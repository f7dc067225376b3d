package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreStaysOffline checks DESIGN.md §1: lang, stdlib and engine (but its
// git provider) never depend on a cluster client.
func TestCoreStaysOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "../lang/...", "../stdlib/...", "./", "./source", "./startest", "./worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("the offline core depends on %s", pkg)
			}
		}
	}
}
