package starlark

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// benchTransform is a typical transform: it copies the inputs into the
// target namespace with labels and adds a ConfigMap and a Deployment.
const benchTransform = `
def labels(ctx, extra = {}):
    l = {"app.kubernetes.io/managed-by": "manifestsync", "target": ctx.target.name}
    l.update(extra)
    return l

def relabel(obj, ctx):
    meta = dict(obj.get("metadata", {}))
    meta["namespace"] = ctx.target.namespace
    meta["labels"] = labels(ctx, meta.get("labels", {}))
    out = dict(obj)
    out["metadata"] = meta
    return out

def deployment(ctx):
    replicas = ctx.params.get("replicas", 1)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels(ctx)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": {"containers": [{"name": "web", "image": ctx.params["image"]}]}},
        },
    }

def main(ctx):
    objs = [relabel(o, ctx) for o in ctx.inputs if o["kind"] != "Namespace"]
    data = {k: str(v) for k, v in ctx.params.items()}
    objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "params"}, "data": data})
    objs.append(deployment(ctx))
    return objs
`

// benchContext builds the ctx argument of main for target i.
func benchContext(tb testing.TB, i int) starlark.Value {
	inputs := []any{}
	for j := range 10 {
		inputs = append(inputs, map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": fmt.Sprintf("s%d", j), "labels": map[string]any{"team": "web"}},
			"data":     map[string]any{"k": "dmFsdWU="},
		})
	}
	params := mustValue(tb, map[string]any{"replicas": int64(2), "image": "web:1.4.2"})
	return starlarkstruct.FromStringDict(starlark.String("context"), starlark.StringDict{
		"target": starlarkstruct.FromStringDict(starlark.String("target"), starlark.StringDict{
			"name": starlark.String(fmt.Sprintf("t%d", i)), "namespace": starlark.String("web"),
		}),
		"params": params,
		"inputs": mustValue(tb, inputs),
	})
}

// BenchmarkCall loads the transform once and calls main(ctx) b.N times;
// ns/op is the cost of one call (run with -benchtime=1000x for 1,000 calls).
func BenchmarkCall(b *testing.B) {
	in := New(Options{})
	m := mustLoad(b, in, nil, Script{Source: "app", Path: "transform.star", Inline: []byte(benchTransform)})
	ctx := benchContext(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := in.Call(b.Context(), m, "main", ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallObjects is BenchmarkCall plus converting the result with
// Limits.Objects, as the engine does.
func BenchmarkCallObjects(b *testing.B) {
	in := New(Options{})
	m := mustLoad(b, in, nil, Script{Source: "app", Path: "transform.star", Inline: []byte(benchTransform)})
	ctx := benchContext(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		v, err := in.Call(b.Context(), m, "main", ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := in.Limits().Objects(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures a Load whose program is cached.
func BenchmarkLoad(b *testing.B) {
	in := New(Options{})
	script := Script{Source: "app", Path: "transform.star", Inline: []byte(benchTransform)}
	b.ReportAllocs()
	for b.Loop() {
		mustLoad(b, in, nil, script)
	}
}

// FuzzLoadAndCall runs arbitrary script text: it must never panic, and must
// end within the limits.
func FuzzLoadAndCall(f *testing.F) {
	for _, seed := range []string{
		benchTransform,
		"def main(ctx):\n    return [{'a': 1}]\n",
		"def main(ctx):\n    for i in range(1 << 40):\n        pass\n",
		"while True:\n    pass\n",
		"def f():\n    f()\nf()\n",
		"l = []\nl.append(l)\ndef main(ctx):\n    return [{'l': l}]\n",
		"x = [1]\nfor i in range(60):\n    x = [x, x]\ndef main(ctx):\n    return [{'x': x}]\n",
		"load('//x.star', 'x')\n",
		"load('../../etc/passwd', 'x')\n",
		"def main(ctx):\n    return 'x' * 1000\n",
		"s = set([1, 2])\ndef main(ctx):\n    return [{'s': list(s)}]\n",
		"def main(:\n",
	} {
		f.Add(seed)
	}
	files := memFiles{"app/x.star": "x = 1\n", "app/lib/y.star": "load('../x.star', 'x')\ny = x\n"}
	in := New(Options{Limits: Limits{MaxSteps: 200_000, Timeout: 2 * time.Second, MaxDepth: 500, MaxObjects: 100, MaxBytes: 1 << 20}})
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
		_, _ = in.Limits().Objects(v)
	})
}

// checkScriptError fails unless err is what a failing script gives: an
// *Error or a *LimitError.
func checkScriptError(t *testing.T, err error) {
	var se *Error
	var le *LimitError
	if !errors.As(err, &se) && !errors.As(err, &le) {
		t.Errorf("got %T %v, want *Error or *LimitError", err, err)
	}
}
