package main

import (
	"context"
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
