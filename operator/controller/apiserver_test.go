package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// The gate of list and watch calls closes with the first failed probe and
// opens with the next good one, or once a server that answers has stayed
// unready for notReadyGrace; the readiness check follows the probes.
func TestAPIServerProbeGate(t *testing.T) {
	p := &APIServerProbe{log: logr.Discard(), open: make(chan struct{})}
	close(p.open)
	isOpen := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		return p.wait(ctx) == nil
	}
	t0 := time.Now()
	refused := errors.New("connection refused")
	steps := []struct {
		at       time.Duration
		answered bool
		err      error
		open     bool
	}{
		{0, true, nil, true},
		{1 * time.Second, false, refused, false},
		{2 * time.Second, false, refused, false},
		{3 * time.Second, true, errors.New("GET /readyz: 500"), false},
		{3*time.Second + notReadyGrace - time.Millisecond, true, errors.New("GET /readyz: 500"), false},
		{3*time.Second + notReadyGrace, true, errors.New("GET /readyz: 500"), true},
		{4*time.Second + notReadyGrace, false, refused, false},
		{5*time.Second + notReadyGrace, true, nil, true},
	}
	for _, s := range steps {
		p.observe(t0.Add(s.at), s.answered, s.err)
		if got := isOpen(); got != s.open {
			t.Errorf("at %v (answered %v, %v): gate open %v, want %v", s.at, s.answered, s.err, got, s.open)
		}
		if err := p.Check(nil); (err == nil) != (s.err == nil) {
			t.Errorf("at %v: readiness %v after a probe with %v", s.at, err, s.err)
		}
	}

	// A closed gate holds a call until the probe sees the server again.
	p.observe(t0, false, refused)
	done := make(chan error, 1)
	go func() { done <- p.wait(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned %v while the API server was unreachable", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.observe(t0.Add(time.Second), true, nil)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Fatal("wait still holds after the API server answered")
	}
}

func TestFailedChecks(t *testing.T) {
	body := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\n[-]poststarthook/crd-informer-synced failed: reason withheld\nreadyz check failed\n"
	want := ": etcd failed: reason withheld; poststarthook/crd-informer-synced failed: reason withheld"
	if got := failedChecks([]byte(body)); got != want {
		t.Errorf("failedChecks = %q, want %q", got, want)
	}
	if got := failedChecks([]byte("ok")); got != "" {
		t.Errorf("failedChecks(ok) = %q", got)
	}
}
