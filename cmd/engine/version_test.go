package main

import (
	"bytes"
	"runtime"
	"testing"
)

// TestVersionStamped: the version and commit `make image` stamps with
// -ldflags are what `engine version` prints.
func TestVersionStamped(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"

	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("engine version: exit %d: %s", code, stderr.String())
	}
	want := "engine v1.2.3 commit 0123456789abcdef0123456789abcdef01234567 " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := stdout.String(); got != want {
		t.Errorf("engine version = %q, want %q", got, want)
	}
}
