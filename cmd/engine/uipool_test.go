package main

import (
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/engine/worker"
)

// The UI's evaluation worker exists only while diffs are asked for: none
// before the first, none once the last is uiIdle old, none while closed;
// one that is busy is never retired under it.
func TestIdlePool(t *testing.T) {
	starts := 0
	l := &idlePool{idle: 50 * time.Millisecond, start: func() (*worker.Pool, error) {
		starts++
		p, _, err := newSandbox("ui", defaultMaxMemory, uiEvalTimeout)
		return p, err
	}}
	if l.running() {
		t.Fatal("a worker pool before any diff")
	}
	_, done, err := l.acquire()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if !l.running() {
		t.Fatal("the pool was retired while an evaluation held it")
	}
	_, done2, err := l.acquire()
	if err != nil {
		t.Fatal(err)
	}
	done()
	time.Sleep(150 * time.Millisecond)
	if !l.running() || starts != 1 {
		t.Fatalf("running %v, started %d times: want the one pool kept while a second evaluation holds it", l.running(), starts)
	}
	done2()
	deadline := time.Now().Add(5 * time.Second)
	for l.running() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if l.running() {
		t.Fatal("the pool outlived its idle time")
	}
	_, done, err = l.acquire()
	if err != nil || starts != 2 {
		t.Fatalf("after idling: err %v, started %d times, want a new pool", err, starts)
	}
	done()
	l.close()
	if l.running() {
		t.Fatal("a pool after close")
	}
	if _, _, err := l.acquire(); err == nil {
		t.Fatal("a closed pool handed out a worker")
	}
}
