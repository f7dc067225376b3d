package controller

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/git"
)

// A reconcile that did not wait for a git fetch (a *git.PendingError, or
// the source's last snapshot served while the fetch goes on) wakes its
// ManifestSync when the fetch ends, and not before: the worker was
// yielded, and nothing else would look again before the next interval.
func TestWakeAfterFetch(t *testing.T) {
	woken := make(chan reconcile.Request, 4)
	r := &Reconciler{remotes: &remotes{wake: func(reqs []reconcile.Request) {
		for _, req := range reqs {
			woken <- req
		}
	}}}
	ms := newSync("team", "web", v1alpha1.ManifestSyncSpec{})
	pendingErr, stale := make(chan struct{}), make(chan struct{})
	r.wakeAfterFetch(ms, nil, fmt.Errorf("source %q: %w", "repo", &git.PendingError{Done: pendingErr}))
	r.wakeAfterFetch(ms, map[string]*engine.Snapshot{"repo": {Revision: "main@sha1:1", Pending: stale}, "other": {Revision: "x"}}, nil)
	select {
	case req := <-woken:
		t.Fatalf("woke %v before any fetch ended", req)
	case <-time.After(100 * time.Millisecond):
	}
	for _, done := range []chan struct{}{pendingErr, stale} {
		close(done)
		select {
		case req := <-woken:
			if req.Namespace != "team" || req.Name != "web" {
				t.Errorf("woke %v", req)
			}
		case <-time.After(time.Minute):
			t.Fatal("not woken when the fetch ended")
		}
	}
	select {
	case req := <-woken:
		t.Errorf("woke %v once more", req)
	case <-time.After(100 * time.Millisecond):
	}
}
