package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/worker"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// evalWorkerEnv makes the test binary an evaluation worker: the pool of
// the tests starts os.Args[0] with it. init runs before TestMain, so the
// worker never starts an API server.
const evalWorkerEnv = "MANIFESTSYNC_TEST_EVAL_WORKER"

func init() {
	if os.Getenv(evalWorkerEnv) == "1" {
		if err := worker.ServeStdio(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// evaluators is the test operator's Evaluator, which it is given only
// the ManifestSyncs that run user code (evaluatorFor): one whose params
// have "evalWorker" evaluates in a pool of worker processes with the
// default memory limit, as under `engine operator`; the others evaluate
// in process.
var evaluators = &routeEvaluator{}

type routeEvaluator struct {
	once sync.Once
	pool *worker.Pool
	err  error
}

func (r *routeEvaluator) Evaluate(ctx context.Context, spec engine.Spec, opts engine.Options) (*engine.Result, error) {
	if p := spec.Sync.Params; p == nil || !bytes.Contains(p.Raw, []byte(`"evalWorker"`)) {
		return engine.Evaluate(ctx, spec, opts)
	}
	r.once.Do(func() {
		r.pool, r.err = worker.New(worker.Options{Command: []string{os.Args[0]}, Env: []string{evalWorkerEnv + "=1"}})
	})
	if r.err != nil {
		return nil, r.err
	}
	return r.pool.Evaluate(ctx, spec, opts)
}

// A script that allocates without bound, in worker processes, fails at its
// memory limit with a clear status while another ManifestSync keeps
// syncing, and the operator's own memory stays where it was.
func TestEvalWorkerLimits(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("runs out of memory on purpose")
	}
	before, err := residentSize()
	if err != nil {
		t.Skip(err)
	}
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	good := newSync(home, "steady", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["one"], "evalWorker": true}`),
		Targets:   targets(ns),
	})
	createSync(t, good)
	ready(t, good)

	for _, c := range []struct {
		name, script string
		want         []string // the message names one of these
	}{
		{"repeat", "def main(ctx):\n    x = \"a\" * (1 << 29)\n    y = [x] * 8\n    return []\n",
			[]string{"evaluation exceeded its memory limit of 256 MiB"}},
		{"grow", "def main(ctx):\n    l = []\n    for i in range(1 << 40):\n        l.append(i)\n    return l\n",
			[]string{"evaluation exceeded its memory limit of 256 MiB", "step limit of", "timeout of"}},
	} {
		bad := newSync(home, c.name, v1alpha1.ManifestSyncSpec{
			Transform: inline(c.script),
			Params:    params(`{"evalWorker": true}`),
			Targets:   targets(ns),
		})
		createSync(t, bad)
		got := waitFor(t, bad, v1alpha1.ReasonEvalFailed)
		if msg := condition(got, v1alpha1.ConditionReady).Message; !containsAny(msg, c.want) {
			t.Errorf("%s: message %q names none of %q", c.name, msg, c.want)
		}
		waitEvent(t, bad, EventSyncFailed, "limit")
	}

	// The other one keeps syncing, through replaced workers.
	updateSync(t, good, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Params = params(`{"names": ["one", "two"], "evalWorker": true}`)
	})
	ready(t, good)
	configMapWith(t, timeout, good, ns, "two", "target", "t0")

	after, err := residentSize()
	if err != nil {
		t.Fatal(err)
	}
	if after > before+128<<20 {
		t.Errorf("the operator grew from %d MiB to %d MiB", before>>20, after>>20)
	}
	t.Logf("operator RSS %d MiB before, %d MiB after", before>>20, after>>20)
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// residentSize is this process's resident set size, in bytes.
func residentSize() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	var vsz, rss int64
	if _, err := fmt.Sscan(string(b), &vsz, &rss); err != nil {
		return 0, err
	}
	return rss * int64(os.Getpagesize()), nil
}

// countingEvaluator counts the evaluations it is given.
type countingEvaluator struct {
	Evaluator
	mu    sync.Mutex
	calls int
}

func (c *countingEvaluator) Evaluate(ctx context.Context, spec engine.Spec, opts engine.Options) (*engine.Result, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return c.Evaluator.Evaluate(ctx, spec, opts)
}

func (c *countingEvaluator) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// A ManifestSync that runs no code of the user's is evaluated in the
// operator's process, and starts no worker (the pool starts its workers
// with its first evaluation); one with a Starlark transform is evaluated
// in a worker. Both give the same objects.
func TestEvaluatorRouting(t *testing.T) {
	pool, err := worker.New(worker.Options{Workers: 1, Command: []string{os.Args[0]}, Env: []string{evalWorkerEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	workers := &countingEvaluator{Evaluator: pool}
	r := &Reconciler{Options: Options{Evaluator: workers}, Mapper: apimeta.NewDefaultRESTMapper(nil)}
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "tls", "namespace": "home", "resourceVersion": "7"},
		"data":     map[string]any{"tls.crt": "Y3J0"},
	}
	snaps := map[string]*engine.Snapshot{"tls": source.ObjectSnapshot(secret)}
	plain := v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}}},
		Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}},
		Targets: []v1alpha1.Target{{Name: "a", Namespace: "a"}, {Name: "b", Namespace: "b"}},
	}
	scripted := *plain.DeepCopy()
	scripted.Transform = inline("def main(ctx):\n    return ctx.inputs\n")

	ctx := context.Background()
	var digests [][]string
	for i, c := range []struct {
		name  string
		spec  v1alpha1.ManifestSyncSpec
		calls int // of the pool, after this evaluation
	}{
		{"no transform", plain, 0},
		{"starlark transform", scripted, 1},
	} {
		ms := newSync("home", fmt.Sprintf("routing-%d", i), c.spec)
		res, err := r.evaluate(ctx, ms, snaps, &syncState{})
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := workers.count(); got != c.calls {
			t.Errorf("%s: %d evaluations in workers, want %d", c.name, got, c.calls)
		}
		var d []string
		for _, tr := range res.Targets {
			d = append(d, tr.Digest)
		}
		digests = append(digests, d)
	}
	if !slices.Equal(digests[0], digests[1]) {
		t.Errorf("in process %v, in a worker %v", digests[0], digests[1])
	}
}

func TestRunsUserCode(t *testing.T) {
	for _, c := range []struct {
		name string
		spec v1alpha1.ManifestSyncSpec
		want bool
	}{
		{"nothing", v1alpha1.ManifestSyncSpec{}, false},
		{"builtin schemas and patches", v1alpha1.ManifestSyncSpec{
			Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}},
			Targets: []v1alpha1.Target{{Name: "a", Patches: []v1alpha1.Patch{{Patch: "metadata: {labels: {a: b}}"}}}},
		}, false},
		{"starlark", v1alpha1.ManifestSyncSpec{Transform: inline("def main(ctx):\n    return []\n")}, true},
		{"cue", v1alpha1.ManifestSyncSpec{Transform: &v1alpha1.Transform{CUE: &v1alpha1.CUEProgramRef{ProgramRef: v1alpha1.ProgramRef{Inline: "objects: []"}}}}, true},
		{"schemas of a source", v1alpha1.ManifestSyncSpec{Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}, {Source: "repo", Path: "policies"}}}, true},
		{"kustomize", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "x"}}, {Name: "base", Kustomize: &v1alpha1.KustomizeSource{Source: "repo"}}}}, true},
	} {
		if got := runsUserCode(&c.spec); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
