package starlark

import (
	"fmt"
	"testing"

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
