package crd

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClusterClient checks that CRD validation stays offline: `engine vet`
// imports this package, and must run in CI without a cluster client.
func TestNoClusterClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("operator/crd depends on %s", pkg)
			}
		}
	}
}
