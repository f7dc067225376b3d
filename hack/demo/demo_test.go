package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the demo as `DEMO_EXIT=1 make demo` does: every example
// must be Ready on the local control plane within its bound.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and the operator")
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout+time.Minute)
	defer cancel()
	if err := run(ctx, true); err != nil {
		t.Fatal(err)
	}
}

// TestGitDaemonStops: stopping the demo's git server stops the server
// itself, not only the `git` that started it (git-daemon, its child,
// kept the port and outlived every demo).
func TestGitDaemonStops(t *testing.T) {
	url, stop, err := startGitDaemon(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(url, "git://")
	stop()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return // nothing listens any more
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections after the git server was stopped", addr)
		}
	}
}
