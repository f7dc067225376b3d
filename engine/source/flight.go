package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/manifestsync/manifestsync/engine"
)

// Flights runs the fetches of the network providers (git and helm) so that a server that does not answer holds no
// caller longer than Wait: one fetch runs per key (a source and the
// digest of its credentials), callers of the same key join it, and when
// Wait passes first the caller gets the key's last snapshot with Pending
// set, or a *PendingError, and is asked to come back when Done is closed.
// Every fetch runs under its own deadline, Timeout, not the caller's
// context, so that a caller that gives up does not cut short the work
// others wait on. The zero Wait waits for the whole fetch (the CLI).
type Flights struct {
	Wait    time.Duration
	Timeout time.Duration

	mu      sync.Mutex
	flights map[string]*flight
	served  map[string]*engine.Snapshot
}

// flight is one fetch, running or ended.
type flight struct {
	done chan struct{}
	snap *engine.Snapshot
	err  error
}

// ErrPending is what a *PendingError is.
var ErrPending = errors.New("fetch in progress")

// PendingError says that the server did not answer within Flights.Wait;
// the fetch goes on, and Done is closed when it ends.
type PendingError struct {
	Done <-chan struct{}
	Wait time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("%s: not done within %s; retried when it ends", ErrPending, e.Wait)
}

// Is makes errors.Is(err, ErrPending) hold.
func (e *PendingError) Is(target error) bool { return target == ErrPending }

// Do returns the snapshot of key, made by run under Timeout (or joined
// when a fetch of key runs), waiting as Wait says. The snapshot returned
// is the caller's own copy (its Files map, not the contents).
func (f *Flights) Do(ctx context.Context, key string, run func(ctx context.Context) (*engine.Snapshot, error)) (*engine.Snapshot, error) {
	fl, started := f.start(key, run)
	var wait <-chan time.Time
	if f.Wait > 0 {
		// Only the caller that started the fetch waits for it: one that
		// finds it running was told before and is woken by Done.
		d := f.Wait
		if !started {
			d = 0
		}
		t := time.NewTimer(d)
		defer t.Stop()
		wait = t.C
	}
	select {
	case <-fl.done:
	case <-wait:
		if isClosed(fl.done) {
			break
		}
		f.mu.Lock()
		last := f.served[key]
		f.mu.Unlock()
		if last != nil {
			stale := cloneSnapshot(last)
			stale.Pending = fl.done
			return stale, nil
		}
		return nil, &PendingError{Done: fl.done, Wait: f.Wait}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flights[key] == fl { // the next Do asks the server again
		delete(f.flights, key)
	}
	if fl.err != nil {
		delete(f.served, key)
		return nil, fl.err
	}
	f.served[key] = fl.snap
	return cloneSnapshot(fl.snap), nil
}

// Keep forgets the last snapshots of the keys keep refuses, and the ended
// fetches of those keys.
func (f *Flights) Keep(keep func(key string) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.served {
		if !keep(k) {
			delete(f.served, k)
		}
	}
	for k, fl := range f.flights {
		if !keep(k) && isClosed(fl.done) {
			delete(f.flights, k)
		}
	}
}

// Held is how many last snapshots it holds.
func (f *Flights) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.served)
}

func (f *Flights) start(key string, run func(ctx context.Context) (*engine.Snapshot, error)) (*flight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flights == nil {
		f.flights = map[string]*flight{}
		f.served = map[string]*engine.Snapshot{}
	}
	if fl, ok := f.flights[key]; ok {
		return fl, false
	}
	fl := &flight{done: make(chan struct{})}
	f.flights[key] = fl
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	go func() {
		cause := fmt.Errorf("timed out after %s: %w", timeout, context.DeadlineExceeded)
		ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, cause)
		defer cancel()
		fl.snap, fl.err = run(ctx)
		close(fl.done)
	}()
	return fl, true
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func cloneSnapshot(s *engine.Snapshot) *engine.Snapshot {
	c := *s
	c.Files = maps.Clone(s.Files)
	return &c
}
