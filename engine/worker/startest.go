package worker

import (
	"context"
	"io"
	"regexp"

	"github.com/manifestsync/manifestsync/engine/startest"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// testRequest runs one *_test.star file (startest.Run).
type testRequest struct {
	File     startest.File `json:"file"`
	Snapshot *wireSnapshot `json:"snapshot"`
	Limits   lstar.Limits  `json:"limits"`
	// Run is the regular expression tests' names must match; "" for all.
	Run string `json:"run,omitempty"`
	// Update makes assert.golden record its files instead of comparing.
	Update bool `json:"update,omitempty"`
}

// testResponse ends a test file's run; what it wrote came before, in
// output messages.
type testResponse struct {
	Passed int        `json:"passed"`
	Failed int        `json:"failed"`
	Err    *wireError `json:"err,omitempty"`
	// Goldens are the files assert.golden recorded under Update.
	Goldens []stdlib.Golden `json:"goldens,omitempty"`
}

// RunTest is startest.Run in a worker: it runs the test file f (filter
// picks tests by name, "" all) and copies what it writes to w as it
// comes; with update, it returns the golden files assert.golden recorded.
// Besides a bad filter, it returns a *KilledError when the worker had to
// be killed (memory limit, timeout, ctx done) or crashed; what the file
// wrote until then is in w.
func (p *Pool) RunTest(ctx context.Context, w io.Writer, f startest.File, limits lstar.Limits, filter string, update bool) (passed, failed int, goldens []stdlib.Golden, err error) {
	req := &testRequest{File: f, Snapshot: toWireSnapshot(f.Snapshot), Limits: limits, Run: filter, Update: update}
	var testErr error
	err = p.run(ctx, message{Test: req}, func(_ *process, m message) (bool, error) {
		switch {
		case m.Output != nil:
			_, err := io.WriteString(w, *m.Output)
			return false, err
		case m.Tested != nil:
			passed, failed, goldens = m.Tested.Passed, m.Tested.Failed, m.Tested.Goldens
			testErr = fromWireError(m.Tested.Err, nil)
			return true, nil
		}
		return false, errUnexpected
	})
	if err != nil {
		return passed, failed, nil, err
	}
	return passed, failed, goldens, testErr
}

// runTest runs a test file in the worker, each write of the test a message.
func (s *server) runTest(req *testRequest) (*testResponse, error) {
	var filter *regexp.Regexp
	if req.Run != "" {
		var err error
		if filter, err = regexp.Compile(req.Run); err != nil {
			return &testResponse{Err: toWireError(err, false)}, nil
		}
	}
	f := req.File
	f.Snapshot = fromWireSnapshot(req.Snapshot)
	out := &outputWriter{s: s}
	// Tests render charts (helm.template) as eval does offline, with the
	// renderer's default capabilities.
	ctx := stdlib.WithHelm(context.Background(), s.opts.Helm, stdlib.HelmCapabilities{}, req.Limits.WithDefaults().MaxBytes)
	passed, failed, goldens := startest.Run(ctx, out, req.Limits, f, filter, req.Update)
	return &testResponse{Passed: passed, Failed: failed, Goldens: goldens}, out.err
}

// outputWriter sends what is written to it to the parent, one output
// message per write.
type outputWriter struct {
	s   *server
	err error
}

func (o *outputWriter) Write(b []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	text := string(b)
	if o.err = writeFrame(o.s.out, message{Output: &text}); o.err != nil {
		return 0, o.err
	}
	return len(b), nil
}
