package starlark

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	startime "go.starlark.net/lib/time"
	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

func TestErrorPositions(t *testing.T) {
	files := memFiles{
		"app/lib/runtime.star":  "def boom(x):\n    return x // 0\n\nv = 1\n",
		"app/lib/syntax.star":   "x = [1,\n",
		"app/lib/resolve.star":  "x = 1\ny = undefined_name\nz = other\n",
		"app/lib/toplevel.star": "\n\nfail('bad', 42)\n",
		"app/lib/loads.star":    "load('syntax.star', 'x')\n",
	}
	tests := []struct {
		name      string
		script    string
		call      bool // call main
		err       string
		backtrace []string // substrings of the backtrace, in order
		cause     error    // errors.As target that must match
	}{
		{
			name:      "runtime in loaded file",
			script:    "load('lib/runtime.star', 'boom')\n\ndef main():\n    return boom(1)\n",
			call:      true,
			err:       "app/lib/runtime.star:2:14: floored division by zero",
			backtrace: []string{"<inline>:4:16: in main", "app/lib/runtime.star:2:14: in boom", "Error: floored division by zero"},
			cause:     &starlark.EvalError{},
		},
		{
			name:      "fail at top level of loaded file",
			script:    "load('lib/toplevel.star', 'x')\n",
			err:       "app/lib/toplevel.star:3:5: fail: bad 42",
			backtrace: []string{"<inline>:1:1: in <toplevel>", "app/lib/toplevel.star:3:5: in <toplevel>", "Error in fail: fail: bad 42"},
		},
		{
			name:   "syntax in loaded file",
			script: "load('lib/syntax.star', 'x')\n",
			err:    "app/lib/syntax.star:2:1: got end of file, want ']'",
			cause:  syntax.Error{},
		},
		{
			name:   "syntax through two loads",
			script: "load('lib/loads.star', 'x')\n",
			err:    "app/lib/syntax.star:2:1: got end of file, want ']'",
		},
		{
			name:      "resolve in loaded file",
			script:    "load('lib/resolve.star', 'x')\n",
			err:       "app/lib/resolve.star:2:5: undefined: undefined_name",
			backtrace: []string{"app/lib/resolve.star:2:5: undefined: undefined_name", "app/lib/resolve.star:3:5: undefined: other"},
			cause:     resolve.ErrorList{},
		},
		{
			name:   "syntax in script",
			script: "def main(:\n",
			err:    "<inline>:1:11: got ':', want ')'",
		},
		{
			name:      "runtime in script",
			script:    "def main():\n    x = {}\n    return x['missing']\n",
			call:      true,
			err:       `<inline>:3:13: key "missing" not in dict`,
			backtrace: []string{"<inline>:3:13: in main"},
		},
		{
			name:   "no main",
			script: "x = 1\n",
			call:   true,
			err:    "<inline>: no function main is defined",
		},
		{
			name:   "main not a function",
			script: "main = 1\n",
			call:   true,
			err:    "<inline>: main is a int, want function",
		},
		{
			name:   "wrong arguments",
			script: "def main(ctx):\n    pass\n",
			call:   true,
			err:    "<inline>:1:1: function main missing 1 argument (ctx)",
		},
	}
	in := New(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := in.Load(t.Context(), files, Script{Source: "app", Inline: []byte(tt.script)})
			if tt.call && err == nil {
				_, err = in.Call(t.Context(), m, "main")
			}
			if errorString(err) != tt.err {
				t.Fatalf("got error\n\t%s\nwant\n\t%s", errorString(err), tt.err)
			}
			// Callers find the *Error through their own wrapping.
			wrapped := fmt.Errorf("target %q: %w", "dev", err)
			var se *Error
			if !errors.As(wrapped, &se) {
				t.Fatalf("errors.As(*Error) failed on %T", err)
			}
			rest := se.Backtrace
			for _, want := range tt.backtrace {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Fatalf("backtrace lacks %q (in order):\n%s", want, se.Backtrace)
				}
				rest = rest[i+len(want):]
			}
			if tt.cause != nil {
				target := tt.cause
				switch target.(type) {
				case *starlark.EvalError:
					var ee *starlark.EvalError
					if !errors.As(err, &ee) {
						t.Errorf("errors.As(%T) failed", target)
					}
				case syntax.Error:
					var e syntax.Error
					if !errors.As(err, &e) {
						t.Errorf("errors.As(%T) failed", target)
					}
				case resolve.ErrorList:
					var e resolve.ErrorList
					if !errors.As(err, &e) {
						t.Errorf("errors.As(%T) failed", target)
					}
				}
			}
		})
	}
}

// errSentinel is an error a built-in returns, which callers must be able to find.
var errSentinel = errors.New("sentinel")

func TestErrorUnwrapsBuiltinError(t *testing.T) {
	in := New(Options{Predeclared: starlark.StringDict{
		"oops": starlark.NewBuiltin("oops", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			return nil, fmt.Errorf("oops: %w", errSentinel)
		}),
	}})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def main():\n    oops()\n")})
	_, err := in.Call(t.Context(), m, "main")
	if !errors.Is(err, errSentinel) {
		t.Errorf("%v does not wrap the built-in's error", err)
	}
	if want := "<inline>:2:9: oops: sentinel"; errorString(err) != want {
		t.Errorf("got %q, want %q", errorString(err), want)
	}
}

func TestDeepBacktraceElided(t *testing.T) {
	in := New(Options{})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def f(n):\n    if n == 0:\n        fail('bottom')\n    f(n - 1)\n\ndef main():\n    f(5000)\n")})
	_, err := in.Call(t.Context(), m, "main")
	var se *Error
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want *Error", err)
	}
	if !strings.Contains(se.Backtrace, "frames elided") || len(se.Backtrace) > 4096 {
		t.Errorf("backtrace of %d bytes not elided:\n%.500s", len(se.Backtrace), se.Backtrace)
	}
	if !strings.HasSuffix(se.Backtrace, "Error in fail: fail: bottom") {
		t.Errorf("backtrace does not end with the error:\n%s", se.Backtrace)
	}
}

func TestDigest(t *testing.T) {
	files := memFiles{
		"app/transform.star": "load('lib/a.star', 'a')\ndef main(ctx):\n    return a\n",
		"app/lib/a.star":     "load('@other//b.star', 'b')\na = b\n",
		"other/b.star":       "b = 1\n",
	}
	in := New(Options{})
	script := Script{Source: "app", Path: "transform.star"}
	m1 := mustLoad(t, in, files, script)
	m2 := mustLoad(t, New(Options{}), files, script)
	if m1.Digest() != m2.Digest() {
		t.Errorf("digest not stable: %s != %s", m1.Digest(), m2.Digest())
	}
	if !strings.HasPrefix(m1.Digest(), "sha256:") || len(m1.Digest()) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<hex>", m1.Digest())
	}
	want := []LoadedFile{
		{"app", "transform.star", "sha256:" + sha256hex(files["app/transform.star"])},
		{"app", "lib/a.star", "sha256:" + sha256hex(files["app/lib/a.star"])},
		{"other", "b.star", "sha256:" + sha256hex(files["other/b.star"])},
	}
	if fmt.Sprint(m1.Files) != fmt.Sprint(want) {
		t.Errorf("Files = %v, want %v", m1.Files, want)
	}

	// A change to a transitively loaded file changes the digest.
	changed := memFiles{}
	for k, v := range files {
		changed[k] = v
	}
	changed["other/b.star"] = "b = 2\n"
	m3 := mustLoad(t, in, changed, script)
	if m3.Digest() == m1.Digest() {
		t.Errorf("digest did not change with a loaded file")
	}
	// So does the same text under another name.
	renamed := Script{Source: "app", Path: "copy.star"}
	changed["app/copy.star"] = files["app/transform.star"]
	if mustLoad(t, in, changed, renamed).Digest() == m3.Digest() {
		t.Errorf("digest did not change with the script's path")
	}
}

func TestCompileCache(t *testing.T) {
	files := memFiles{
		"app/transform.star": "load('lib.star', 'x')\ndef main(ctx):\n    return x\n",
		"app/lib.star":       "x = 1\n",
	}
	in := New(Options{})
	script := Script{Source: "app", Path: "transform.star"}
	mustLoad(t, in, files, script)
	if n := in.programs.compiles.Load(); n != 2 {
		t.Fatalf("first Load compiled %d programs, want 2", n)
	}
	for range 10 {
		mustLoad(t, in, files, script)
	}
	if n := in.programs.compiles.Load(); n != 2 {
		t.Errorf("repeated Loads compiled %d programs, want 2 (the cache was missed)", n)
	}
	// The same text under another name is another program (positions differ).
	files["app/other.star"] = files["app/transform.star"]
	mustLoad(t, in, files, Script{Source: "app", Path: "other.star"})
	if n := in.programs.compiles.Load(); n != 3 {
		t.Errorf("compiled %d programs, want 3", n)
	}
	// A changed file is recompiled.
	files["app/lib.star"] = "x = 2\n"
	m := mustLoad(t, in, files, script)
	if n := in.programs.compiles.Load(); n != 4 {
		t.Errorf("compiled %d programs, want 4", n)
	}
	if v, _ := in.Call(t.Context(), m, "main", starlark.None); v.String() != "2" {
		t.Errorf("main() = %v after the change, want 2", v)
	}
	// The cache is bounded.
	for i := range programCacheSize + 50 {
		mustLoad(t, in, nil, Script{Inline: fmt.Appendf(nil, "x = %d\n", i)})
	}
	if n := in.programs.len(); n != programCacheSize {
		t.Errorf("cache holds %d programs, want %d", n, programCacheSize)
	}
}

func TestConcurrentCalls(t *testing.T) {
	in := New(Options{})
	m := mustLoad(t, in, nil, Script{Inline: []byte(benchTransform)})
	want, err := in.Call(t.Context(), m, "main", benchContext(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for range 25 {
				got, err := in.Call(t.Context(), m, "main", benchContext(t, 0))
				if err != nil {
					errs <- err
					return
				}
				if got.String() != want.String() {
					errs <- fmt.Errorf("goroutine %d: got a different result", g)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestClockAndPrintAndContext(t *testing.T) {
	type key struct{}
	var printed []string
	in := New(Options{
		Predeclared: starlark.StringDict{
			"time": startime.Module,
			"ctxvalue": starlark.NewBuiltin("ctxvalue", func(thread *starlark.Thread, _ *starlark.Builtin, _ starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
				v, _ := ContextOf(thread).Value(key{}).(string)
				return starlark.String(v), nil
			}),
		},
		Print: func(_ *starlark.Thread, msg string) { printed = append(printed, msg) },
	})
	m := mustLoad(t, in, nil, Script{Inline: []byte("print('loading')\nloaded_at = str(time.now())\n" +
		"def main():\n    print('calling')\n    return [str(time.now()), ctxvalue()]\n")})
	if got := m.Globals["loaded_at"].String(); got != `"1970-01-01 00:00:00 +0000 UTC"` {
		t.Errorf("time.now() at load = %s, want the epoch", got)
	}
	ctx := context.WithValue(t.Context(), key{}, "engine value")
	v, err := in.Call(ctx, m, "main")
	if err != nil {
		t.Fatal(err)
	}
	if want := `["1970-01-01 00:00:00 +0000 UTC", "engine value"]`; v.String() != want {
		t.Errorf("main() = %s, want %s", v, want)
	}
	if strings.Join(printed, ",") != "loading,calling" {
		t.Errorf("printed %q", printed)
	}

	fixed := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	in = New(Options{Now: fixed, Predeclared: starlark.StringDict{"time": startime.Module}})
	m = mustLoad(t, in, nil, Script{Inline: []byte("now = time.now().unix\n")})
	if got := m.Globals["now"].String(); got != fmt.Sprint(fixed.Unix()) {
		t.Errorf("time.now().unix = %s, want %d", got, fixed.Unix())
	}
	if ContextOf(&starlark.Thread{}) != context.Background() {
		t.Errorf("ContextOf a foreign thread is not context.Background()")
	}
}

// TestNoHostAccess checks that the universe gives scripts no way out.
func TestNoHostAccess(t *testing.T) {
	in := New(Options{})
	for _, name := range []string{"open", "exec", "eval", "getenv", "time", "os", "__import__", "load_file"} {
		_, err := in.Load(t.Context(), nil, Script{Inline: []byte("x = " + name)})
		if want := "<inline>:1:5: undefined: " + name; errorString(err) != want {
			t.Errorf("%s: got %v, want %s", name, err, want)
		}
	}
}

// TestPanicInBuiltin checks that a panicking built-in fails the evaluation,
// not the process.
func TestPanicInBuiltin(t *testing.T) {
	in := New(Options{Predeclared: starlark.StringDict{
		"boom": starlark.NewBuiltin("boom", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
			panic("bug in a built-in")
		}),
	}})
	_, err := in.Load(t.Context(), nil, Script{Inline: []byte("boom()\n")})
	if want := "<inline>: internal error: panic during evaluation: bug in a built-in"; errorString(err) != want {
		t.Errorf("Load: got %v, want %s", err, want)
	}
	m := mustLoad(t, in, nil, Script{Inline: []byte("def main():\n    boom()\n")})
	if _, err := in.Call(t.Context(), m, "main"); err == nil {
		t.Errorf("Call: no error")
	}
	if _, err := in.Call(t.Context(), nil, "main"); err == nil {
		t.Errorf("Call on a nil module: no error")
	}
}
