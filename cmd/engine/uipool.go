package main

import (
	"errors"
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/engine/worker"
)

// uiIdle is how long the web UI's evaluation worker stays after its last
// diff.
const uiIdle = 5 * time.Minute

// idlePool holds the web UI's evaluation worker only while diffs are asked
// for: the pool starts at the first evaluation and is closed uiIdle after
// the last one ends, so that a UI nobody asks for a diff costs no worker
// process (one is up to the default --max-memory, 512Mi, outside the
// operator's --eval-workers).
type idlePool struct {
	start func() (*worker.Pool, error)
	idle  time.Duration

	mu     sync.Mutex
	pool   *worker.Pool
	busy   int
	timer  *time.Timer
	closed bool
}

var errUIEvalStopped = errors.New("the UI's evaluator is stopped")

// acquire returns the pool, started if it is not, and what the caller
// calls once its evaluation ends.
func (l *idlePool) acquire() (*worker.Pool, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, nil, errUIEvalStopped
	}
	if l.pool == nil {
		p, err := l.start()
		if err != nil {
			return nil, nil, err
		}
		l.pool = p
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.busy++
	return l.pool, l.release, nil
}

func (l *idlePool) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy--
	if l.busy == 0 && !l.closed {
		l.timer = time.AfterFunc(l.idle, l.retire)
	}
}

// retire closes the pool when no evaluation has begun since the timer was
// set (a timer that fired late finds busy evaluations, or none to close).
func (l *idlePool) retire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy > 0 || l.pool == nil {
		return
	}
	_ = l.pool.Close()
	l.pool = nil
}

// running says whether the pool is started (for tests).
func (l *idlePool) running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pool != nil
}

// close stops the pool for good; evaluations under way fail.
func (l *idlePool) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.pool != nil {
		_ = l.pool.Close()
		l.pool = nil
	}
}
