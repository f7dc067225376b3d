package starlark

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// sleepBuiltin is a slow but step-cheap built-in: sleep(ms) waits, and
// returns early when the evaluation's context is done, as built-ins should.
var sleepBuiltin = starlark.NewBuiltin("sleep", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var ms int
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &ms); err != nil {
		return nil, err
	}
	ctx := ContextOf(thread)
	select {
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return starlark.None, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
})

// stubbornSleep ignores the context: the thread is cancelled only once it returns.
var stubbornSleep = starlark.NewBuiltin("stubborn_sleep", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	time.Sleep(10 * time.Millisecond)
	return starlark.None, nil
})

func limitsInterpreter(l Limits) *Interpreter {
	return New(Options{
		Limits:      l,
		Predeclared: starlark.StringDict{"sleep": sleepBuiltin, "stubborn_sleep": stubbornSleep},
	})
}

func TestLimitsDefaults(t *testing.T) {
	got := Limits{MaxObjects: 5, MaxBytes: -1}.WithDefaults()
	want := DefaultLimits()
	want.MaxObjects = 5
	if got != want {
		t.Errorf("WithDefaults = %+v, want %+v", got, want)
	}
	if New(Options{}).Limits() != DefaultLimits() {
		t.Errorf("New(Options{}) does not use the default limits")
	}
}

func TestLimitsEndEvaluation(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		script string
		limit  string
		err    string // the error's message
	}{
		{
			name:   "steps in a range loop",
			limits: Limits{MaxSteps: 100_000},
			script: "def main():\n    for i in range(1 << 40):\n        pass\n",
			limit:  LimitSteps,
			err:    "<inline>:2:5: step limit of 100000 exceeded",
		},
		{
			name:   "steps in while True",
			limits: Limits{MaxSteps: 100_000},
			script: "def main():\n    x = 0\n    while True:\n        x += 1\n",
			limit:  LimitSteps,
		},
		{
			name:   "steps at top level",
			limits: Limits{MaxSteps: 100_000},
			script: "while True:\n    pass\n",
			limit:  LimitSteps,
			err:    "<inline>:1:1: step limit of 100000 exceeded",
		},
		{
			name:   "recursion",
			script: "def f():\n    f()\n\ndef main():\n    f()\n",
			limit:  LimitDepth,
			err:    "<inline>:2:5: call depth limit of 10000 exceeded",
		},
		{
			name:   "mutual recursion with a lower depth",
			limits: Limits{MaxDepth: 100},
			script: "def f(n):\n    return g(n)\n\ndef g(n):\n    return f(n)\n\ndef main():\n    f(1)\n",
			limit:  LimitDepth,
		},
		{
			name:   "recursion through a built-in",
			script: "def f(x):\n    return sorted([1, 2], key = f)\n\ndef main():\n    f(1)\n",
			limit:  LimitDepth,
		},
		{
			name:   "timeout in a context-aware built-in",
			limits: Limits{Timeout: 50 * time.Millisecond},
			script: "def main():\n    for i in range(1000):\n        sleep(10)\n",
			limit:  LimitTimeout,
			err:    "<inline>:3:14: timeout of 50ms exceeded",
		},
		{
			name:   "timeout in a built-in that ignores the context",
			limits: Limits{Timeout: 50 * time.Millisecond},
			script: "def main():\n    for i in range(1000):\n        stubborn_sleep()\n",
			limit:  LimitTimeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := limitsInterpreter(tt.limits)
			start := time.Now()
			var err error
			m, err := in.Load(t.Context(), nil, Script{Source: "app", Inline: []byte(tt.script)})
			if err == nil {
				_, err = in.Call(t.Context(), m, "main")
			}
			if d := time.Since(start); d > 30*time.Second { // unlimited, none ends
				t.Errorf("took %v", d)
			}
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("got %T %v, want *LimitError", err, err)
			}
			if le.Limit != tt.limit {
				t.Errorf("Limit = %q, want %q (%v)", le.Limit, tt.limit, err)
			}
			if !le.Pos.IsValid() {
				t.Errorf("no position in %v", err)
			}
			if tt.err != "" && err.Error() != tt.err {
				t.Errorf("got error\n\t%v\nwant\n\t%s", err, tt.err)
			}
			if tt.limit == LimitTimeout && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("timeout %v does not wrap context.DeadlineExceeded", err)
			}
			// The interpreter stays usable after a limit.
			m2, err := in.Load(t.Context(), nil, Script{Inline: []byte("def main():\n    return 1\n")})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := in.Call(t.Context(), m2, "main"); err != nil || v.String() != "1" {
				t.Fatalf("after the limit: %v, %v", v, err)
			}
		})
	}
}

// TestStepsPerCall checks that each Call gets the whole step budget.
func TestStepsPerCall(t *testing.T) {
	in := limitsInterpreter(Limits{MaxSteps: 10_000})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def main():\n    for i in range(1000):\n        pass\n")})
	for i := range 50 {
		if _, err := in.Call(t.Context(), m, "main"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// TestStepsAcrossLoadedFiles checks that the step limit of a Load covers
// every file it loads.
func TestStepsAcrossLoadedFiles(t *testing.T) {
	files := memFiles{"app/spin.star": "for i in range(1000):\n    pass\n"}
	in := limitsInterpreter(Limits{MaxSteps: 10_000})
	_, err := in.Load(t.Context(), files, Script{Source: "app", Inline: []byte("load('spin.star', 'i')\nfor i in range(1000):\n    pass\n")})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitSteps {
		t.Fatalf("got %v, want the step limit", err)
	}
	_, err = in.Load(t.Context(), files, Script{Source: "app", Inline: []byte("load('spin.star', 'i')\nload('@app//spin.star', j = 'i')\n")})
	if err != nil {
		t.Fatalf("a file loaded twice was charged twice: %v", err)
	}
	// A limit hit inside a loaded file is reported there.
	_, err = in.Load(t.Context(), memFiles{"app/loop.star": "\nwhile True:\n    pass\n"},
		Script{Source: "app", Inline: []byte("load('loop.star', 'x')")})
	if !errors.As(err, &le) || le.Pos.Filename() != "app/loop.star" {
		t.Fatalf("got %v, want the step limit in app/loop.star", err)
	}
}

func TestContextDeadline(t *testing.T) {
	in := limitsInterpreter(Limits{})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def main():\n    while True:\n        sleep(5)\n")})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err := in.Call(ctx, m, "main")
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitTimeout || le.Value != "context deadline" {
		t.Fatalf("got %v, want a timeout at the context deadline", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not wrap context.DeadlineExceeded", err)
	}
	if want := "<inline>:3:14: evaluation timed out (context deadline exceeded)"; err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestContextCancel(t *testing.T) {
	in := limitsInterpreter(Limits{})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def main():\n    while True:\n        pass\n")})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := in.Call(ctx, m, "main")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	var le *LimitError
	if errors.As(err, &le) {
		t.Errorf("cancellation reported as a limit: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "<inline>:") {
		t.Errorf("error %q has no position", err)
	}
	// Already cancelled: nothing runs.
	if _, err := in.Call(ctx, m, "main"); !errors.Is(err, context.Canceled) {
		t.Errorf("call with a cancelled context: %v", err)
	}
	if _, err := in.Load(ctx, nil, Script{Inline: []byte("x = 1")}); !errors.Is(err, context.Canceled) {
		t.Errorf("load with a cancelled context: %v", err)
	}
}

func TestObjects(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		expr   string
		want   string // objects as JSON
		err    string
		limit  string
	}{
		{name: "none", expr: "None", err: "main() returned None; return a list of objects"},
		{name: "empty", expr: "[]", want: "[]"},
		{name: "list", expr: `[{"kind": "A", "n": 1}, {"kind": "B", "l": [1.5, True, None]}]`, want: `[{"kind":"A","n":1},{"kind":"B","l":[1.5,true,null]}]`},
		{name: "tuple", expr: `({"kind": "A"},)`, want: `[{"kind":"A"}]`},
		{name: "struct value", expr: `[{"s": struct(a = 1)}]`, want: `[{"s":{"a":1}}]`},
		{name: "not a list", expr: `{"kind": "A"}`, err: "main() result: got dict, want list of dicts"},
		{name: "element", expr: `[{}, {}, {}, 3]`, err: "main() result [3]: got int, want dict"},
		{name: "key", expr: `[{1: 2}]`, err: "main() result [0]: dict key 1 is a int, want string"},
		{name: "nested value", expr: `[{"spec": {"ports": [1, len]}}]`, err: "main() result [0]: spec: ports: [1]: cannot convert builtin_function_or_method to data"},
		{name: "range", expr: `[{"r": range(1 << 40)}]`, err: "main() result [0]: r: cannot convert range to data"},
		{name: "float", expr: `[{"f": float("nan")}]`, err: "main() result [0]: f: float nan has no JSON form"},
		{name: "big int", expr: `[{"i": 1 << 70}]`, err: "main() result [0]: i: integer 1180591620717411303424 does not fit in 64 bits"},
		{name: "objects", limits: Limits{MaxObjects: 2}, expr: `[{}, {}, {}]`, err: "main() result: 3 objects: object limit of 2 exceeded", limit: LimitObjects},
		{name: "bytes", limits: Limits{MaxBytes: 20}, expr: `[{"a": "0123456789"}, {"b": "0123456789"}]`, err: "main() result [1]: size limit of 20 bytes exceeded", limit: LimitBytes},
		// A value that shares one list 2^60 times is tiny in memory; converting it must stop at the byte limit.
		{name: "shared", expr: `[{"x": shared}]`, err: "main() result [0]: size limit of 67108864 bytes exceeded", limit: LimitBytes},
		// Objects of about 260 KiB each, sharing one value: the first ones are
		// converted, the rest measured before the limit is reached.
		{name: "shared by many", expr: `[{"x": mid}] * 1000`, err: "main() result [252]: size limit of 67108864 bytes exceeded", limit: LimitBytes},
	}
	m := mustLoad(t, New(Options{}), nil, Script{Inline: []byte("shared = [1]\nfor i in range(60):\n    shared = [shared, shared]\nmid = [\"x\" * 253]\nfor i in range(10):\n    mid = [mid, mid]\n")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := starlark.EvalOptions(&fileOptions, &starlark.Thread{}, "expr", tt.expr, starlark.StringDict{
				"struct": starlark.NewBuiltin("struct", starlarkstruct.Make), "shared": m.Globals["shared"], "mid": m.Globals["mid"],
			})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			objs, err := tt.limits.Objects(v)
			if d := time.Since(start); d > 30*time.Second { // unlimited: 2^60 elements
				t.Errorf("took %v", d)
			}
			if tt.err != "" {
				if errorString(err) != tt.err {
					t.Fatalf("got error\n\t%s\nwant\n\t%s", errorString(err), tt.err)
				}
				var le *LimitError
				if got := errors.As(err, &le); got != (tt.limit != "") || got && le.Limit != tt.limit {
					t.Errorf("LimitError: %v, want limit %q", got, tt.limit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := mustJSON(t, objs); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// TestUnboundedRecursionBackstop checks that with the depth limit raised out
// of the way, starlark-go's own guard still ends a runaway recursion with a
// clean error. It grows the Go stack to about 256 MiB, so -short skips it.
func TestUnboundedRecursionBackstop(t *testing.T) {
	if testing.Short() {
		t.Skip("grows the goroutine stack to ~256 MiB")
	}
	in := New(Options{Limits: Limits{MaxDepth: 1 << 30}})
	m := mustLoad(t, in, nil, Script{Inline: []byte("def f():\n    f()\n\ndef main():\n    f()\n")})
	_, err := in.Call(t.Context(), m, "main")
	var se *Error
	if !errors.As(err, &se) || err.Error() != "<inline>:2:5: Starlark stack overflow" {
		t.Fatalf("got %T %v, want a Starlark stack overflow *Error", err, err)
	}
	if len(se.Backtrace) > 8192 {
		t.Errorf("backtrace of %d bytes", len(se.Backtrace))
	}
}

// TestStepLimitLine checks that a step limit names the line of the loop
// the script was running, whatever the step it hit at: starlark-go gives
// the jump that closes a loop the def line, which used to be reported.
func TestStepLimitLine(t *testing.T) {
	const script = "def main():\n    x = 0\n    while True:\n        x += 1\n"
	for steps := uint64(10_000); steps < 10_010; steps++ {
		in := New(Options{Limits: Limits{MaxSteps: steps}})
		m := mustLoad(t, in, nil, Script{Inline: []byte(script)})
		_, err := in.Call(t.Context(), m, "main")
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != LimitSteps {
			t.Fatalf("max steps %d: got %v, want the step limit", steps, err)
		}
		if le.Pos.Line != 3 && le.Pos.Line != 4 {
			t.Errorf("max steps %d: %v names line %d, want the loop's (3 or 4)", steps, err, le.Pos.Line)
		}
	}
}
