package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/lang/cue"
)

// Serve is a worker's main loop: it reads the config, bounds the process's
// memory, then answers requests from r one at a time (evaluations, test
// files, validations) and writes each answer to w, until r ends. Nothing else may write to w: the caller points
// os.Stdout elsewhere (stray output would corrupt the protocol).
func Serve(r io.Reader, w io.Writer) error {
	return ServeWith(r, w, ServeOptions{})
}

// ServeOptions are what a worker is given besides its requests: the parts
// of an evaluation the engine may not import itself.
type ServeOptions struct {
	// Helm renders the charts of helm sources and helm.template, when the
	// parent asks for them (helm's Renderer); nil fails them.
	Helm engine.HelmRenderer
	// Stuck, when set, reports whether work abandoned at its deadline
	// still runs in the process (helm.Stuck: a Go template cannot
	// be interrupted). The worker then exits after its answer, which says
	// so, and the parent starts a fresh one for the next evaluation.
	Stuck func() bool
}

// errRetired ends a worker that said it retires.
var errRetired = errors.New("retired")

// ServeWith is Serve with opts.
func ServeWith(r io.Reader, w io.Writer, opts ServeOptions) error {
	s := &server{in: bufio.NewReaderSize(r, 1<<16), out: bufio.NewWriterSize(w, 1<<16), opts: opts}
	var m message
	if err := readFrame(s.in, maxFrame, &m); err != nil {
		return fmt.Errorf("eval worker: reading the config: %w", err)
	}
	if m.Config == nil {
		return errors.New("eval worker: the first message is not the config")
	}
	as, err := LimitProcess(m.Config.MemoryLimit)
	if err != nil {
		return fmt.Errorf("eval worker: %w", err)
	}
	if err := writeFrame(s.out, message{Ready: &ready{AddressSpace: as}}); err != nil {
		return fmt.Errorf("eval worker: %w", err)
	}
	for {
		var m message
		if err := readFrame(s.in, maxFrame, &m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the parent is done with us
			}
			return fmt.Errorf("eval worker: %w", err)
		}
		if err := s.serve(m); errors.Is(err, errRetired) {
			return nil
		} else if err != nil {
			return fmt.Errorf("eval worker: %w", err)
		}
	}
}

// serve answers one request.
func (s *server) serve(m message) error {
	switch {
	case m.Eval != nil:
		s.scopes, s.err = nil, nil
		spec, opts := fromWireRequest(m.Eval, s.scope)
		if m.Eval.Helm {
			opts.Helm = s.opts.Helm
		}
		res, err := engine.Evaluate(context.Background(), spec, opts)
		if s.err != nil {
			return fmt.Errorf("asking for a scope: %w", s.err)
		}
		resp := toWireResponse(res, err)
		resp.Retire = s.opts.Stuck != nil && s.opts.Stuck()
		if err := writeFrame(s.out, message{Result: resp}); err != nil || !resp.Retire {
			return err
		}
		return errRetired
	case m.Test != nil:
		resp, err := s.runTest(m.Test)
		if err != nil {
			return fmt.Errorf("writing a test's output: %w", err)
		}
		return writeFrame(s.out, message{Tested: resp})
	case m.Validate != nil:
		return writeFrame(s.out, message{Validated: s.validate(m.Validate)})
	}
	return errors.New("expected a request")
}

// LimitProcess sets up the process as a worker runs, before its first
// evaluation: its memory limited to limit bytes (beyond what it has mapped
// already) by a hard address-space limit, so that one huge allocation
// fails at once, and by the Go runtime's soft limit, so that the collector
// works hard before the parent's watchdog has to step in. Within that
// bound an evaluation is a short batch job that keeps its result to the
// end: the collector runs at GOGC 400 unless $GOGC says otherwise, trading
// memory that the limit caps for less time spent collecting.
// It returns the address-space limit set (0 when none is).
func LimitProcess(limit int64) (addressSpace uint64, err error) {
	if limit <= 0 {
		return 0, nil
	}
	debug.SetMemoryLimit(limit)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(workerGCPercent)
	}
	if raceEnabled {
		return 0, nil
	}
	return limitAddressSpace(uint64(limit))
}

// workerGCPercent is a worker's GOGC, unless the environment sets one.
const workerGCPercent = 400

// server is one worker's state; the engine evaluates targets concurrently,
// so scope questions are serialised.
type server struct {
	in   *bufio.Reader
	out  *bufio.Writer
	opts ServeOptions

	mu     sync.Mutex
	scopes map[schema.GroupVersionKind]scopeMessage // answers of this evaluation
	err    error                                    // the first failed question

	schemas map[string]*cue.Schemas // packages validate loaded, by name, dir and content
}

// scope asks the parent whether a kind is namespaced, once per kind and
// evaluation.
func (s *server) scope(gvk schema.GroupVersionKind) (namespaced, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scopes == nil {
		s.scopes = map[schema.GroupVersionKind]scopeMessage{}
	}
	if a, seen := s.scopes[gvk]; seen {
		return a.Namespaced, a.OK
	}
	if s.err != nil {
		return engine.BuiltinScope(gvk)
	}
	q := &scopeMessage{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind}
	if err := writeFrame(s.out, message{Scope: q}); err != nil {
		s.err = err
		return engine.BuiltinScope(gvk)
	}
	var m message
	if err := readFrame(s.in, maxFrame, &m); err != nil {
		s.err = err
		return engine.BuiltinScope(gvk)
	}
	if m.Scope == nil {
		s.err = errors.New("expected a scope answer")
		return engine.BuiltinScope(gvk)
	}
	s.scopes[gvk] = *m.Scope
	return m.Scope.Namespaced, m.Scope.OK
}

// ServeStdio serves on the process's stdin and stdout, with os.Stdout
// pointed at stderr so that nothing else writes to the protocol; for the
// eval-worker subcommand, and for tests that start themselves as workers.
func ServeStdio() error {
	return ServeStdioWith(ServeOptions{})
}

// ServeStdioWith is ServeStdio with opts.
func ServeStdioWith(opts ServeOptions) error {
	out := os.Stdout
	os.Stdout = os.Stderr
	return ServeWith(os.Stdin, out, opts)
}
