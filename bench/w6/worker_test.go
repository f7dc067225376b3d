package w6

import (
	"context"
	"os/exec"
	"testing"
)

// idleWorker reads the memory of a process that waits on its stdin (cat
// here) and ends it by closing its stdin.
func TestIdleWorker(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat")
	}
	m, err := idleWorker(context.Background(), cat)
	if err != nil {
		t.Fatal(err)
	}
	if m.rss <= 0 || m.anon <= 0 || m.file <= 0 || m.anon+m.file > m.rss+0.01 {
		t.Errorf("memory %+v: want a peak at least its anonymous and file-backed parts, all above 0", m)
	}
	if _, err := idleWorker(context.Background(), "/nonexistent/engine-worker"); err == nil {
		t.Error("a worker that does not exist: no error")
	}
}
