package starlark

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzLoadAndCall runs arbitrary script text as a transform, under small
// limits. Its seed corpus is testdata/fuzz/FuzzLoadAndCall. Whatever the
// script, nothing panics; every failure is a script *Error or a
// *LimitError whose position, when it has one, is in a file the script
// could run; the run ends in bounded time; and a result that converts
// keeps within the object and byte limits, with None refused.
func FuzzLoadAndCall(f *testing.F) {
	files := memFiles{"app/x.star": "x = 1\n", "app/lib/y.star": "load('../x.star', 'x')\ny = x\n"}
	limits := Limits{MaxSteps: 200_000, Timeout: 2 * time.Second, MaxDepth: 500, MaxObjects: 100, MaxBytes: 1 << 20}
	in := New(Options{Limits: limits})
	ctx := benchContext(f, 0)
	f.Fuzz(func(t *testing.T, src string) {
		// Built-ins cannot be interrupted (a single "x" * 700000000 takes
		// about a second), so allow generous slack over the timeout.
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("evaluation took %v", d)
			}
		}()
		m, err := in.Load(t.Context(), files, Script{Source: "app", Inline: []byte(src)})
		if err != nil {
			checkScriptError(t, err)
			return
		}
		if _, ok := m.Globals["main"]; !ok {
			return
		}
		v, err := in.Call(t.Context(), m, "main", ctx)
		if err != nil {
			checkScriptError(t, err)
			return
		}
		objs, err := in.Limits().Objects(v)
		if err != nil {
			if v.Type() == "NoneType" && !errors.Is(err, ErrNoneResult) {
				t.Errorf("None gave %v, want ErrNoneResult", err)
			}
			if !strings.HasPrefix(err.Error(), resultName) && !errors.Is(err, ErrNoneResult) {
				t.Errorf("conversion error %q does not name main()'s result", err)
			}
			return
		}
		if len(objs) > limits.MaxObjects {
			t.Errorf("%d objects, over the limit of %d", len(objs), limits.MaxObjects)
		}
		b, err := json.Marshal(objs)
		if err != nil {
			t.Fatalf("converted objects are not JSON: %v", err)
		}
		// The limit counts each object's JSON; the list adds brackets
		// and commas.
		if int64(len(b)) > limits.MaxBytes+int64(len(objs))+2 {
			t.Errorf("%d bytes of JSON, over the limit of %d", len(b), limits.MaxBytes)
		}
	})
}

// checkScriptError fails unless err is what a failing script gives: an
// *Error or a *LimitError, positioned (when it is) in one of the files the
// script could run.
func checkScriptError(t *testing.T, err error) {
	t.Helper()
	var se *Error
	var le *LimitError
	switch {
	case errors.As(err, &se):
		checkFile(t, err, se.Pos.Filename())
	case errors.As(err, &le):
		checkFile(t, err, le.Pos.Filename())
	default:
		t.Errorf("got %T %v, want *Error or *LimitError", err, err)
	}
	if len(err.Error()) > 1<<20 {
		t.Errorf("error of %d bytes", len(err.Error()))
	}
}

func checkFile(t *testing.T, err error, file string) {
	t.Helper()
	switch file {
	case "", "<inline>", "app/x.star", "app/lib/y.star", "<builtin>":
	default:
		t.Errorf("error in file %q: %v", file, err)
	}
}
