package cue

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// appTransform makes a Deployment per target and a ConfigMap per input.
const appTransform = `package app

params: {
	replicas: *1 | int & >=0
	image:    string
}
target: {name: string, namespace: string, ...}
inputs: [...{...}]

objects: {
	deployment: {
		apiVersion: "apps/v1"
		kind:       "Deployment"
		metadata: name: "web-" + target.name
		spec: replicas: params.replicas
		spec: template: spec: containers: [{name: "web", image: params.image}]
	}
	copies: [for o in inputs {
		apiVersion: "v1"
		kind:       "ConfigMap"
		metadata: name: o.metadata.name + "-copy"
		data: o.data
	}]
}
`

func mustTransform(t *testing.T, files map[string][]byte, expr string) *Transform {
	t.Helper()
	tr, err := LoadTransform("repo", files, ".", expr)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestTransform(t *testing.T) {
	tr := mustTransform(t, tree("app.cue", appTransform), "objects")
	in := Input{
		Params: map[string]any{"image": "web:1.2"},
		Target: map[string]any{"name": "dev", "namespace": "web-dev"},
		Inputs: []map[string]any{{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "settings"},
			"data":     map[string]any{"a": "1"},
		}},
	}
	got, err := tr.Eval(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web-dev"},
			"spec": map[string]any{
				"replicas": int64(1), // the schema's default
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "web", "image": "web:1.2"},
				}}},
			},
		},
		{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "settings-copy"},
			"data":     map[string]any{"a": "1"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}

	// The same transform serves the next target with other params.
	in.Params = map[string]any{"image": "web:1.3", "replicas": 3}
	in.Target = map[string]any{"name": "prod", "namespace": "web"}
	got, err = tr.Eval(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	d := got[0]
	if d["metadata"].(map[string]any)["name"] != "web-prod" || d["spec"].(map[string]any)["replicas"] != int64(3) {
		t.Errorf("second target: %v", d)
	}
}

func TestTransformShapes(t *testing.T) {
	const obj = `{apiVersion: "v1", kind: "ConfigMap", metadata: name: "a"}`
	for _, tc := range []struct {
		name, src, expr string
		n               int
	}{
		{"list", "objects: [" + obj + ", " + obj + "]", "objects", 2},
		{"struct", "objects: {a: " + obj + ", b: " + obj + "}", "objects", 2},
		{"nested", "out: x: {a: [" + obj + "], b: c: " + obj + "}", "out.x", 2},
		{"one object", "objects: " + obj, "objects", 1},
		{"empty", "objects: []", "objects", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTransform(t, tree("t.cue", "package t\n"+tc.src), tc.expr)
			got, err := tr.Eval(context.Background(), Input{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n {
				t.Errorf("%d objects, want %d: %v", len(got), tc.n, got)
			}
		})
	}
}

func TestTransformErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, expr string
		in              Input
		want            []string
	}{
		{
			name: "incomplete",
			src:  "params: image: string\nobjects: [{apiVersion: \"v1\", kind: \"Pod\", metadata: name: params.image}]",
			expr: "objects",
			want: []string{"repo/t.cue:", "incomplete"},
		},
		{
			name: "conflict with params",
			src:  "params: replicas: int & <10\nobjects: []",
			expr: "objects",
			in:   Input{Params: map[string]any{"replicas": 20}},
			want: []string{"repo/t.cue:2:", "invalid value 20"},
		},
		{
			name: "not objects",
			src:  "objects: [1]",
			expr: "objects",
			want: []string{"objects[0]: int is not an object", "repo/t.cue:2:"},
		},
		{
			name: "missing expression",
			src:  "objects: []",
			expr: "manifests",
			want: []string{`expression "manifests": no such field`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustTransform(t, tree("t.cue", "package t\n"+tc.src), tc.expr)
			_, err := tr.Eval(context.Background(), tc.in)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadTransformErrors(t *testing.T) {
	if _, err := LoadTransform("repo", tree("t.cue", "package t\nx: "), ".", "x"); err == nil || !strings.Contains(err.Error(), "repo/t.cue:2:") {
		t.Errorf("syntax error: %v", err)
	}
	// A conflict outside the expression is an error too, found when the
	// package is loaded or at the latest when it is evaluated.
	tr, err := LoadTransform("repo", tree("t.cue", "package t\nx: y & 2\ny: 1\nobjects: []"), ".", "objects")
	if err == nil {
		_, err = tr.Eval(context.Background(), Input{})
	}
	if err == nil || !strings.Contains(err.Error(), "repo/t.cue:") || !strings.Contains(err.Error(), "conflicting values") {
		t.Errorf("conflict: %v", err)
	}
	if _, err := LoadTransform("repo", tree("t.cue", "package t"), ".", "a..b"); err == nil || !strings.Contains(err.Error(), `expression "a..b"`) {
		t.Errorf("bad expression: %v", err)
	}
}

func TestTransformTimeout(t *testing.T) {
	// Unifying a large comprehension takes far longer than the deadline.
	tr := mustTransform(t, tree("t.cue", `package t
import "list"
objects: [for i in list.Range(0, 20000, 1) {apiVersion: "v1", kind: "ConfigMap", metadata: name: "c\(i)"}]
`), "objects")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start, cpu := time.Now(), cpuTime(t)
	_, err := tr.Eval(ctx, Input{})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	// The whole comprehension costs seconds of CPU: a deadline seen only
	// at the end would spend them. CPU time, unlike the wall clock, does
	// not grow when other processes load the machine.
	if d := cpuTime(t) - cpu; d > time.Second {
		t.Errorf("returned after %v of CPU time (%v on the wall clock)", d, time.Since(start))
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A file without a package clause may use what Eval fills in, and its
// errors keep their line numbers.
func TestTransformAnonymous(t *testing.T) {
	tr := mustTransform(t, tree("t.cue", `objects: [{apiVersion: "v1", kind: "ConfigMap", metadata: name: target.name}]
objects: [{data: n: "\(params.n)"}]
params: n: <10
`), "objects")
	got, err := tr.Eval(context.Background(), Input{Target: map[string]any{"name": "dev", "namespace": "d", "cluster": "in-cluster", "labels": map[string]any{}}, Params: map[string]any{"n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if name := got[0]["metadata"].(map[string]any)["name"]; name != "dev" {
		t.Errorf("name %v, want dev", name)
	}
	_, err = tr.Eval(context.Background(), Input{Params: map[string]any{"n": 11}})
	if err == nil || !strings.Contains(err.Error(), "repo/t.cue:3:") {
		t.Errorf("error %v, want one at repo/t.cue:3", err)
	}
}
