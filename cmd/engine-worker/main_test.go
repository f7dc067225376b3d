package main

import (
	"runtime"
	"strings"
	"testing"
)

// The version line names the program, the stamped version and commit (as
// hack/image stamps them), the Go version and the platform; unstamped, it
// says devel.
func TestVersionLine(t *testing.T) {
	if got := versionLine(); !strings.HasPrefix(got, "engine-worker ") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("versionLine() = %q", got)
	}
	version, commit = "v1.2.3", "abc123"
	t.Cleanup(func() { version, commit = "", "" })
	want := "engine-worker v1.2.3 commit abc123 " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	if got := versionLine(); got != want {
		t.Errorf("versionLine() = %q, want %q", got, want)
	}
}
