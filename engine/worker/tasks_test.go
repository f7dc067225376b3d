package worker

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/startest"
	"github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// testFile is a test file in a one-file tree.
func testFile(script string) startest.File {
	files := map[string][]byte{"x_test.star": []byte(script)}
	return startest.File{Root: "dir", Rel: "x_test.star", Source: "dir", Snapshot: &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}}
}

// A test file runs in a worker as it runs in process: same output, same
// counts; a bomb ends with the memory limit, after what the file wrote
// until then, and the next file runs in a new worker.
func TestPoolRunTest(t *testing.T) {
	p := testPool(t, Options{Workers: 1})
	ctx := context.Background()
	script := "def test_a():\n    print(\"hello\")\n\ndef test_b():\n    assert.eq(1, 2)\n\ndef test_c():\n    pass\n"
	var want bytes.Buffer
	wp, wf, _ := startest.Run(ctx, &want, lstar.Limits{}, testFile(script), nil, false)
	var got bytes.Buffer
	gp, gf, _, err := p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "", false)
	if err != nil || gp != wp || gf != wf || got.String() != want.String() {
		t.Errorf("in a worker: %d passed, %d failed, %v:\n%s\nwant %d, %d:\n%s", gp, gf, err, got.String(), wp, wf, want.String())
	}
	if !strings.Contains(got.String(), "hello\nPASS test_a (dir/x_test.star:1)\nFAIL test_b (dir/x_test.star:4)\n") {
		t.Errorf("output %q", got.String())
	}
	got.Reset()
	if gp, gf, _, err := p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "_c$", false); err != nil || gp != 1 || gf != 0 || got.String() != "PASS test_c (dir/x_test.star:7)\n" {
		t.Errorf("filter _c$: %d passed, %d failed, %v: %q", gp, gf, err, got.String())
	}
	if _, _, _, err := p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "(", false); err == nil || !strings.Contains(err.Error(), "missing closing )") {
		t.Errorf("a bad filter: %v", err)
	}

	got.Reset()
	bomb := "def test_small():\n    print(\"small\")\n\ndef test_bomb():\n    x = \"a\" * (1 << 29)\n    y = [x + x + str(i) for i in range(6)]\n"
	_, _, _, err = p.RunTest(ctx, &got, testFile(bomb), lstar.Limits{}, "", false)
	var killed *KilledError
	if !errors.As(err, &killed) || killed.Limit != LimitMemory {
		t.Errorf("bomb: %v", err)
	}
	if want := "small\nPASS test_small (dir/x_test.star:1)\n"; got.String() != want {
		t.Errorf("bomb: output %q, want %q", got.String(), want)
	}
	got.Reset()
	if gp, _, _, err := p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "", false); err != nil || gp != 2 {
		t.Errorf("after the bomb: %d passed, %v", gp, err)
	}
}

// Under update, the golden files assert.golden records come back from
// the worker; without it, a missing golden file fails the test.
func TestPoolRunTestGoldens(t *testing.T) {
	p := testPool(t, Options{Workers: 1})
	ctx := context.Background()
	script := "def test_snap():\n    assert.golden({\"b\": 1, \"a\": [1]}, \"testdata/snap.yaml\")\n    assert.golden(\"text\", \"//t.txt\")\n"
	var got bytes.Buffer
	gp, gf, goldens, err := p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "", true)
	if err != nil || gp != 1 || gf != 0 {
		t.Fatalf("update: %d passed, %d failed, %v:\n%s", gp, gf, err, got.String())
	}
	want := []stdlib.Golden{{Source: "dir", Path: "t.txt", Data: []byte("text")}, {Source: "dir", Path: "testdata/snap.yaml", Data: []byte("a:\n- 1\nb: 1\n")}}
	if !reflect.DeepEqual(goldens, want) {
		t.Errorf("goldens %+v, want %+v", goldens, want)
	}
	got.Reset()
	gp, gf, goldens, err = p.RunTest(ctx, &got, testFile(script), lstar.Limits{}, "", false)
	if err != nil || gp != 0 || gf != 1 || goldens != nil || !strings.Contains(got.String(), "dir/testdata/snap.yaml: no such golden file (engine test --update writes it)") {
		t.Errorf("no update: %d passed, %d failed, %v, %v:\n%s", gp, gf, goldens, err, got.String())
	}
}

const policyCUE = `package policy

#Object: metadata: labels: team: string
#ConfigMap: data?: [string]: =~"^[a-z]+$"
`

// Validation in a worker gives what cue.Schemas.Validate gives in process;
// a package that does not compile is an error.
func TestPoolValidate(t *testing.T) {
	p := testPool(t, Options{Workers: 1})
	ctx := context.Background()
	pkg := Schemas{Name: "policy", Files: map[string][]byte{"p.cue": []byte(policyCUE)}, Dir: "."}
	objects := []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "labels": map[string]any{"team": "x"}}, "data": map[string]any{"k": "ok"}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "b"}, "data": map[string]any{"k": "NO", "n": "1"}},
	}
	if _, err := p.Validate(ctx, pkg, nil); err != nil {
		t.Fatal(err)
	}
	got, err := p.Validate(ctx, pkg, objects)
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := cue.Load(pkg.Name, pkg.Files, pkg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(objects) {
		t.Fatalf("%d validations of %d objects", len(got), len(objects))
	}
	for i, o := range objects {
		_, want, err := schemas.Validate(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			want = nil
		}
		for j := range want {
			want[j] = cue.Violation{Path: want[j].Path, Msg: want[j].Msg, Rule: want[j].Rule, Pos: want[j].Pos}
		}
		if !reflect.DeepEqual(got[i].Violations, want) || got[i].Err != "" {
			t.Errorf("object %d: %+v, want %+v", i, got[i], want)
		}
	}
	if len(got[1].Violations) == 0 {
		t.Error("object b has no violations")
	}
	bad := Schemas{Name: "bad", Files: map[string][]byte{"p.cue": []byte("package bad\n#Object: {\n")}, Dir: "."}
	if _, err := p.Validate(ctx, bad, objects); err == nil || !strings.Contains(err.Error(), "p.cue") {
		t.Errorf("a package that does not compile: %v", err)
	}
}

// With Grace, a Starlark timeout inside the evaluation, which says where
// the script was, ends it before the worker is killed; a package that
// compiles past the timeout is killed for it.
func TestPoolGrace(t *testing.T) {
	const timeout = 500 * time.Millisecond
	p := testPool(t, Options{Workers: 1, Timeout: timeout, Grace: time.Second})
	ctx := context.Background()
	res, err := p.Evaluate(ctx, inlineSpec("def main(ctx):\n    for i in range(1 << 40):\n        pass\n"), engine.Options{Limits: lstar.Limits{Timeout: timeout, MaxSteps: 1 << 50}})
	if err != nil {
		t.Fatalf("killed: %v", err)
	}
	if err := res.Err(); err == nil || !strings.Contains(err.Error(), "<inline>:2:") || !strings.Contains(err.Error(), "timeout of 500ms exceeded") {
		t.Errorf("got %v", err)
	}
	slow := Schemas{Name: "slow", Dir: ".", Files: map[string][]byte{"p.cue": []byte("package slow\n\nimport \"list\"\n\n_n: [for i in list.Range(0, 2000, 1) for j in list.Range(0, 1500, 1) if i*j < 0 {i}]\n#Object: {_c: len(_n), ...}\n")}}
	start := time.Now()
	_, err = p.Validate(ctx, slow, nil)
	var killed *KilledError
	if !errors.As(err, &killed) || err.Error() != "evaluation was killed: timeout of 500ms exceeded" {
		t.Errorf("slow package: %v", err)
	}
	if d := time.Since(start); d < timeout+time.Second || d > 30*time.Second {
		t.Errorf("slow package killed after %v, want the timeout and the grace", d)
	}
}
