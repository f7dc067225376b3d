package cue

import "sync"

// pool hands out the evaluators of one source: each evaluation runs in a
// CUE context of its own, at most opts.Concurrency at once. A CUE context
// keeps every value made in it, so an evaluator is dropped, and the source
// compiled into a fresh context, once it has served opts.RecycleAfter
// evaluations or opts.RecycleBytes of input.
type pool struct {
	src  *source
	opts Options
	// running has a token for each evaluation under way.
	running chan struct{}
	mu      sync.Mutex
	idle    []*evaluator // the last used on top: one caller keeps one context
}

// newPool compiles src once, so that a broken package fails here.
func newPool(src *source, opts Options) (*pool, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.RecycleAfter <= 0 {
		opts.RecycleAfter = DefaultRecycleAfter
	}
	if opts.RecycleBytes <= 0 {
		opts.RecycleBytes = DefaultRecycleBytes
	}
	ev, err := src.compile()
	if err != nil {
		return nil, err
	}
	return &pool{src: src, opts: opts, running: make(chan struct{}, opts.Concurrency), idle: []*evaluator{ev}}, nil
}

// acquire waits for a free slot and returns an evaluator charged with one
// more use of size bytes, which the caller must release; on error the slot
// is free again.
func (p *pool) acquire(size int64) (*evaluator, error) {
	p.running <- struct{}{}
	p.mu.Lock()
	var ev *evaluator
	if n := len(p.idle); n > 0 {
		ev, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if ev == nil || ev.uses >= p.opts.RecycleAfter || ev.bytes >= p.opts.RecycleBytes {
		ev = nil // let the old context be collected while compiling the new one
		var err error
		if ev, err = p.src.compile(); err != nil {
			<-p.running
			return nil, err
		}
	}
	ev.uses++
	ev.bytes += size
	return ev, nil
}

// release frees the slot acquire took and keeps ev, when not nil, for the
// next evaluation.
func (p *pool) release(ev *evaluator) {
	if ev != nil {
		p.mu.Lock()
		p.idle = append(p.idle, ev)
		p.mu.Unlock()
	}
	<-p.running
}
