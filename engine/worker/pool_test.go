package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// workerEnv makes the test binary serve as a worker: the pool starts
// os.Args[0] with it, which is faster than building the engine binary.
const workerEnv = "MANIFESTSYNC_TEST_EVAL_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "helm" {
		if err := ServeStdioWith(ServeOptions{Helm: fakeRenderer{}, Stuck: func() bool { return true }}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(workerEnv) == "1" {
		if err := ServeStdio(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testPool(t testing.TB, opts Options) *Pool {
	t.Helper()
	opts.Command = []string{os.Args[0]}
	opts.Env = append(opts.Env, workerEnv+"=1")
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// exampleSpec is examples/starlark-app with its source read from disk.
func exampleSpec(t testing.TB) engine.Spec {
	t.Helper()
	dir := "../../examples/starlark-app"
	b, err := os.ReadFile(filepath.Join(dir, "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := engine.LoadSyncFile("sync.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := source.Dir(filepath.Join(dir, "app"), source.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	snap.Time = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	return engine.Spec{Sync: &f.Sync.Spec, Snapshots: map[string]*engine.Snapshot{"app": snap}}
}

// inlineSpec is one target whose transform is script, with an object
// source (numbers of both kinds) it may read as ctx.inputs.
func inlineSpec(script string) engine.Spec {
	return engine.Spec{
		Sync: &v1alpha1.ManifestSyncSpec{
			Sources:   []v1alpha1.Source{{Name: "cfg", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg"}}},
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: script}},
			Params:    &runtime.RawExtension{Raw: []byte(`{"n": 3, "f": 2.0, "g": 0.5}`)},
			Targets:   []v1alpha1.Target{{Name: "dev", Namespace: "dev"}},
		},
		Snapshots: map[string]*engine.Snapshot{"cfg": {
			Revision: "resourceVersion:7",
			Object: map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cfg", "namespace": "dev"},
				"data":     map[string]any{"a": "1"},
				"x":        map[string]any{"int": int64(2), "float": float64(2), "half": 0.5, "null": nil, "list": []any{int64(1), 1.0, "s", true}},
			},
		}},
	}
}

// remoteSelectorSpec has a namespaceSelector target in this cluster and
// one in the remote cluster of Secret dr.
func remoteSelectorSpec() engine.Spec {
	spec := inlineSpec(goodScript)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}
	spec.Sync.Targets = []v1alpha1.Target{
		{Name: "local", NamespaceSelector: sel},
		{Name: "dr", NamespaceSelector: sel, Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "dr"}}},
	}
	return spec
}

// collidingSpec has two targets writing one ConfigMap and a third that
// does not.
func collidingSpec() engine.Spec {
	spec := inlineSpec("def main(ctx):\n    return [{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"c\"}}]\n")
	spec.Sync.Targets = []v1alpha1.Target{{Name: "a", Namespace: "web"}, {Name: "b", Namespace: "web"}, {Name: "c", Namespace: "other"}}
	return spec
}

const goodScript = `
def main(ctx):
    src = ctx.inputs[0]
    x = src["x"]
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "out"},
         "data": {"types": ",".join([type(x["int"]), type(x["float"]), type(x["half"]), type(x["list"][1])]),
                  "n": str(ctx.params["n"]), "f": str(ctx.params["f"])}},
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
         "spec": {"float": x["float"], "half": x["half"], "int": x["int"]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}},
    ]
`

// secretScript makes a Secret, whose value the parent must learn.
const secretScript = `
def main(ctx):
    s = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "made-in-the-worker"}}
    return [s]
`

// scope says Widgets are cluster-scoped, which BuiltinScope does not know.
func scope(gvk schema.GroupVersionKind) (bool, bool) {
	if gvk.Kind == "Widget" {
		return false, true
	}
	return engine.BuiltinScope(gvk)
}

func TestPoolMatchesInProcess(t *testing.T) {
	p := testPool(t, Options{Workers: 1})
	ctx := context.Background()
	for name, c := range map[string]struct {
		spec engine.Spec
		opts engine.Options
	}{
		"starlark-app": {exampleSpec(t), engine.Options{}},
		"object":       {inlineSpec(goodScript), engine.Options{Scope: scope}},
		"broken":       {inlineSpec("def main(ctx):\n    return [1]\n"), engine.Options{}},
		"invalid":      {engine.Spec{Sync: &v1alpha1.ManifestSyncSpec{}}, engine.Options{}},
		"limit":        {inlineSpec("def main(ctx):\n    for i in range(1 << 30):\n        pass\n"), engine.Options{Limits: limits(1000)}},
		"collision":    {collidingSpec(), engine.Options{}},
		"secret":       {inlineSpec(secretScript), engine.Options{}},
		"substitute":   {substituteSpec(), engine.Options{}},
		"root":         {rootSpec(), engine.Options{}},
		// A remote target's selector matches its own cluster's
		// namespaces, which the worker must be given too.
		"remote selector": {remoteSelectorSpec(), engine.Options{
			Namespaces:        []engine.Namespace{{Name: "here", Labels: map[string]string{"team": "x"}}},
			ClusterNamespaces: map[string][]engine.Namespace{"dr/value": {{Name: "there-a", Labels: map[string]string{"team": "x"}}, {Name: "there-b", Labels: map[string]string{"team": "x"}}}},
		}},
		"remote cluster without namespaces": {remoteSelectorSpec(), engine.Options{
			Namespaces:        []engine.Namespace{{Name: "here", Labels: map[string]string{"team": "x"}}},
			ClusterNamespaces: map[string][]engine.Namespace{"dr/value": {}},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			want, wantErr := engine.Evaluate(ctx, c.spec, c.opts)
			got, gotErr := p.Evaluate(ctx, c.spec, c.opts)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("error %v, want %v", gotErr, wantErr)
			}
			if want == nil {
				if got != nil {
					t.Fatalf("got a result, want none")
				}
				return
			}
			if got.Revision != want.Revision || !reflect.DeepEqual(got.Inputs, want.Inputs) {
				t.Errorf("revision %s, want %s", got.Revision, want.Revision)
			}
			if fmt.Sprint(got.Err()) != fmt.Sprint(want.Err()) {
				t.Errorf("targets' error %v, want %v", got.Err(), want.Err())
			}
			// The parent masks what the worker's evaluation knew.
			for _, v := range want.Redactor.Values() {
				if m := got.Redactor.String(v); m != redact.Mask {
					t.Errorf("the parent's redactor leaves %q as %q", v, m)
				}
			}
			if len(got.Targets) != len(want.Targets) {
				t.Fatalf("%d targets, want %d", len(got.Targets), len(want.Targets))
			}
			for i, w := range want.Targets {
				g := got.Targets[i]
				if g.Digest != w.Digest || g.ID() != w.ID() || g.Cluster != w.Cluster {
					t.Errorf("target %s: digest %s, want %s", w.ID(), g.Digest, w.Digest)
				}
				var gc, wc *engine.CollisionError
				if !reflect.DeepEqual(g.Collisions, w.Collisions) || errors.As(g.Err, &gc) != errors.As(w.Err, &wc) {
					t.Errorf("target %s: collisions %v (%v), want %v (%v)", w.ID(), g.Collisions, g.Err, w.Collisions, w.Err)
				}
				if len(g.Objects) != len(w.Objects) {
					t.Fatalf("target %s: %d objects, want %d", w.ID(), len(g.Objects), len(w.Objects))
				}
				for j := range w.Objects {
					if !reflect.DeepEqual(g.Objects[j].Object, w.Objects[j].Object) {
						t.Errorf("target %s: object %d:\n got %#v\nwant %#v", w.ID(), j, g.Objects[j].Object, w.Objects[j].Object)
					}
				}
			}
		})
	}
}

func TestPoolLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs out of memory on purpose")
	}
	p := testPool(t, Options{Workers: 1})
	ctx := context.Background()
	before := residentOf(t, os.Getpid())
	for _, c := range []struct {
		name, script string
		want         []string // the message names one of these
	}{
		{"repeat", "def main(ctx):\n    x = \"a\" * (1 << 29)\n    y = [x] * 8\n    return []\n",
			[]string{"evaluation exceeded its memory limit of 256 MiB"}},
		{"grow", "def main(ctx):\n    l = []\n    for i in range(1 << 40):\n        l.append(i)\n    return l\n",
			[]string{"evaluation exceeded its memory limit of 256 MiB", "step limit of", "timeout of"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			res, err := p.Evaluate(ctx, inlineSpec(c.script), engine.Options{})
			if err == nil {
				err = res.Err()
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !containsAny(err.Error(), c.want) {
				t.Errorf("error %q names none of %q", err, c.want)
			}
			t.Logf("%v after %v", err, time.Since(start).Round(time.Millisecond))
		})
	}
	// The worker was replaced: a good spec still evaluates.
	res, err := p.Evaluate(ctx, exampleSpec(t), engine.Options{})
	if err != nil || res.Err() != nil {
		t.Fatalf("after the failures: %v, %v", err, res.Err())
	}
	if after := residentOf(t, os.Getpid()); after > before+64<<20 {
		t.Errorf("this process grew from %d MiB to %d MiB", before>>20, after>>20)
	}
}

func TestPoolTimeout(t *testing.T) {
	p := testPool(t, Options{Workers: 1, Timeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := p.Evaluate(context.Background(), inlineSpec("def main(ctx):\n    for i in range(1 << 40):\n        pass\n"), engine.Options{})
	if err == nil || err.Error() != "evaluation was killed: timeout of 300ms exceeded" {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 30*time.Second { // unkilled, 2^40 steps
		t.Errorf("took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = p.Evaluate(ctx, inlineSpec("def main(ctx):\n    for i in range(1 << 40):\n        pass\n"), engine.Options{})
	if err == nil || !strings.Contains(err.Error(), "evaluation") {
		t.Fatalf("got %v", err)
	}
	if res, err := p.Evaluate(context.Background(), inlineSpec(goodScript), engine.Options{}); err != nil || res.Err() != nil {
		t.Fatalf("after the timeouts: %v, %v", err, res.Err())
	}
}

func TestPoolConcurrent(t *testing.T) {
	p := testPool(t, Options{Workers: 2})
	spec := exampleSpec(t)
	want, err := engine.Evaluate(context.Background(), spec, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := p.Evaluate(context.Background(), spec, engine.Options{})
			switch {
			case err != nil:
				errs <- err
			case res.Revision != want.Revision || res.Targets[1].Digest != want.Targets[1].Digest:
				errs <- fmt.Errorf("revision %s, want %s", res.Revision, want.Revision)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.mu.Lock()
	n := len(p.live)
	p.mu.Unlock()
	if n != 2 {
		t.Errorf("%d workers, want 2", n)
	}
}

// BenchmarkEvaluate compares engine.Evaluate with a pooled worker, for
// examples/starlark-app and for a one-object inline transform (where the
// round trip is all there is to measure).
func BenchmarkEvaluate(b *testing.B) {
	for name, spec := range map[string]engine.Spec{
		"starlark-app": exampleSpec(b),
		"tiny":         inlineSpec("def main(ctx):\n    return [{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \"x\"}}]\n"),
	} {
		b.Run(name+"/in-process", func(b *testing.B) {
			for b.Loop() {
				if _, err := engine.Evaluate(context.Background(), spec, engine.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/pool", func(b *testing.B) {
			p := testPool(b, Options{Workers: 1})
			if _, err := p.Evaluate(context.Background(), spec, engine.Options{}); err != nil {
				b.Fatal(err) // starts the worker
			}
			for b.Loop() {
				if _, err := p.Evaluate(context.Background(), spec, engine.Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func limits(steps uint64) lstar.Limits { return lstar.Limits{MaxSteps: steps} }

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func residentOf(t *testing.T, pid int) uint64 {
	t.Helper()
	rss, err := residentSize(pid)
	if err != nil {
		t.Skip(err)
	}
	return rss
}

// A worker that dies on its own is reported and replaced.
func TestPoolCrash(t *testing.T) {
	p, err := New(Options{Workers: 1, Command: []string{"sh", "-c", "echo 'panic: boom' >&2; exit 2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Evaluate(context.Background(), inlineSpec(goodScript), engine.Options{}); err == nil || !strings.Contains(err.Error(), "evaluation worker crashed: panic: boom") {
		t.Errorf("got %v", err)
	}

	// A crash quoting a Secret of the sources shows it masked.
	p, err = New(Options{Workers: 1, Command: []string{"sh", "-c", "echo 'panic: bad value crash-leaked-value' >&2; exit 2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	spec := inlineSpec(goodScript)
	spec.Snapshots["cfg"].Object = map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "cfg"}, "stringData": map[string]any{"k": "crash-leaked-value"}}
	if _, err := p.Evaluate(context.Background(), spec, engine.Options{}); err == nil || !strings.Contains(err.Error(), "panic: bad value ***") {
		t.Errorf("got %v", err)
	}

	p = testPool(t, Options{Workers: 1})
	loop := inlineSpec("def main(ctx):\n    for i in range(1 << 40):\n        pass\n")
	errc := make(chan error, 1)
	go func() {
		_, err := p.Evaluate(context.Background(), loop, engine.Options{})
		errc <- err
	}()
	var pid int
	eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for w := range p.live {
			pid = w.pid
		}
		return pid != 0
	})
	time.Sleep(100 * time.Millisecond) // into the evaluation
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "evaluation worker crashed: signal: killed") {
		t.Errorf("got %v", err)
	}
	if res, err := p.Evaluate(context.Background(), inlineSpec(goodScript), engine.Options{}); err != nil || res.Err() != nil {
		t.Fatalf("after the crash: %v, %v", err, res.Err())
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// An evaluation takes the idle worker used last: evaluations one after
// another run one process, however many Workers allows. With IdleTimeout,
// a worker unused for that long stops, and the next evaluation starts one
// again; a busy worker is never stopped for idling, however long it runs.
func TestPoolIdle(t *testing.T) {
	p := testPool(t, Options{Workers: 2, IdleTimeout: 200 * time.Millisecond})
	spec := exampleSpec(t)
	for range 3 {
		if _, err := p.Evaluate(context.Background(), spec, engine.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.Running(); n != 1 {
		t.Errorf("%d workers after evaluations one after another, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := p.Running(); n != 0 {
		t.Fatalf("%d workers outlived their idle time", n)
	}
	if _, err := p.Evaluate(context.Background(), spec, engine.Options{}); err != nil {
		t.Fatalf("an evaluation after the workers stopped: %v", err)
	}

	busy := testPool(t, Options{Workers: 1, IdleTimeout: time.Hour})
	w, err := busy.acquire(context.Background())
	if err != nil || w != nil {
		t.Fatalf("acquire: %v, %v; want no idle worker yet", w, err)
	}
	if w, err = busy.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	busy.reap(time.Now().Add(2 * time.Hour))
	if n := busy.Running(); n != 1 {
		t.Fatalf("%d workers: a busy one was stopped for idling", n)
	}
	busy.release(w)
	busy.reap(time.Now().Add(2 * time.Hour))
	if n := busy.Running(); n != 0 {
		t.Fatalf("%d workers, want the idle one stopped", n)
	}
	select {
	case <-w.exited:
	default:
		t.Error("the stopped worker's process is still running")
	}
}

// With SpawnDelay, an evaluation that finds the running worker busy waits
// for it rather than start another, unless the busy one outlasts the
// delay: short evaluations at once run in one process, and one behind a
// long evaluation gets a second.
func TestPoolSpawnDelay(t *testing.T) {
	ctx := context.Background()
	spec := exampleSpec(t)
	p := testPool(t, Options{Workers: 2, SpawnDelay: time.Minute}) // far over 8 short evaluations, even on a loaded machine
	if _, err := p.Evaluate(ctx, spec, engine.Options{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := p.Evaluate(ctx, spec, engine.Options{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := p.Running(); n != 1 {
		t.Errorf("%d workers after short evaluations at once, want 1", n)
	}

	q := testPool(t, Options{Workers: 2, SpawnDelay: 100 * time.Millisecond})
	long := inlineSpec("def main(ctx):\n    for i in range(1 << 40):\n        pass\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = q.Evaluate(ctx, long, engine.Options{Limits: lstar.Limits{Timeout: time.Minute, MaxSteps: 1 << 50}})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for q.Running() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := q.Evaluate(ctx, spec, engine.Options{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("the long evaluation ended before the short one: the test proves nothing")
	default:
	}
	if n := q.Running(); n != 2 {
		t.Errorf("%d workers, want a second one for the evaluation behind a long one", n)
	}
	_ = q.Close() // ends the long one
	<-done
}

// With MANIFESTSYNC_EVAL_WORKER set, a pool without a Command starts the
// program it names (here this test binary, serving as a worker through
// workerEnv); one that is missing fails to start with the variable named;
// an explicit Command wins over it.
func TestPoolCommandEnv(t *testing.T) {
	t.Setenv(workerEnv, "1")
	t.Setenv(CommandEnv, os.Args[0])
	p, err := New(Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if got := p.opts.Command; !slices.Equal(got, []string{os.Args[0]}) {
		t.Fatalf("command %q, want %q from %s", got, os.Args[0], CommandEnv)
	}
	if _, err := p.Evaluate(context.Background(), exampleSpec(t), engine.Options{}); err != nil {
		t.Fatalf("evaluating in the worker %s names: %v", CommandEnv, err)
	}

	missing := filepath.Join(t.TempDir(), "engine-worker")
	t.Setenv(CommandEnv, missing)
	q, err := New(Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	_, err = q.Evaluate(context.Background(), exampleSpec(t), engine.Options{})
	if err == nil || !strings.Contains(err.Error(), CommandEnv) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a worker %s names that does not exist: %v, want an error naming both", CommandEnv, err)
	}

	r, err := New(Options{Workers: 1, Command: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.opts.Command; got[0] != "sh" {
		t.Errorf("an explicit Command became %q", got)
	}
}
