package controller

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/engine/worker"
	helmrender "github.com/manifestsync/manifestsync/helm"
	"github.com/manifestsync/manifestsync/internal/lean"
)

// evalWorkerEnv makes the test binary an evaluation worker: the pool of
// the tests starts os.Args[0] with it. init runs before TestMain, so the
// worker never starts an API server.
const evalWorkerEnv = "MANIFESTSYNC_TEST_EVAL_WORKER"

func init() {
	if os.Getenv(evalWorkerEnv) == "1" {
		if err := worker.ServeStdioWith(worker.ServeOptions{Helm: helmrender.Renderer{}, Stuck: helmrender.Stuck}); err != nil {
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
		// Its event says what its status says (on a loaded machine the
		// growing list may reach the timeout before the memory limit).
		waitEvent(t, bad, EventSyncFailed, c.want...)
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

// A ManifestSync whose inputs are all objects the operator holds, and
// that runs no code of the user's, is evaluated in the operator's
// process, and starts no worker (the pool starts its workers with its
// first evaluation); one with a Starlark transform is evaluated in a
// worker, and so is one whose git files merely pass through, since
// parsing them may take 100 times their size. The first two give the same
// objects, the third the objects of its file.
//
// What a hostile tenant gets: its git file of dense YAML is parsed under
// the worker's memory limit, never in the operator's heap.
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
	snaps := map[string]*engine.Snapshot{
		"tls": source.ObjectSnapshot(secret),
		"repo": {Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567", Files: map[string][]byte{
			"cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-git}\ndata: {k: v}\n"),
		}},
	}
	plain := v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}}},
		Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}},
		Targets: []v1alpha1.Target{{Name: "a", Namespace: "a"}, {Name: "b", Namespace: "b"}},
	}
	scripted := *plain.DeepCopy()
	scripted.Transform = inline("def main(ctx):\n    return ctx.inputs\n")
	fromGit := *plain.DeepCopy()
	fromGit.Sources = []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://git.example/repo.git"}}}

	ctx := context.Background()
	var objects [][]string
	for i, c := range []struct {
		name  string
		spec  v1alpha1.ManifestSyncSpec
		calls int // of the pool, after this evaluation
	}{
		{"an object source, no transform", plain, 0},
		{"starlark transform", scripted, 1},
		{"git files passing through", fromGit, 2},
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
		var o []string
		for _, tr := range res.Targets {
			o = append(o, tr.Digest)
			for _, obj := range tr.Objects {
				o = append(o, obj.GetKind()+"/"+obj.GetName())
			}
		}
		objects = append(objects, o)
	}
	if !slices.Equal(objects[0], objects[1]) {
		t.Errorf("in process %v, in a worker %v", objects[0], objects[1])
	}
	if got := objects[2]; len(got) != 4 || got[1] != "ConfigMap/from-git" || got[3] != "ConfigMap/from-git" {
		t.Errorf("git files in a worker gave %v; want ConfigMap/from-git in each target", got)
	}
}

// needsWorker sends to a worker what runs user code or parses files of a
// git source, and nothing else; the lean engine, which links neither CUE
// nor kustomize, also what checks builtin schemas or applies a
// strategic-merge patch (wantLean, where it differs).
func TestNeedsWorker(t *testing.T) {
	jsonPatch := []v1alpha1.Patch{{Patch: "[{op: add, path: /metadata/labels/a, value: b}]", Target: &v1alpha1.PatchSelector{Kind: "ConfigMap"}}}
	for _, c := range []struct {
		name     string
		spec     v1alpha1.ManifestSyncSpec
		want     bool
		wantLean *bool
	}{
		{"nothing", v1alpha1.ManifestSyncSpec{}, false, nil},
		{"builtin schemas", v1alpha1.ManifestSyncSpec{Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}}}, false, ptr.To(true)},
		{"strategic-merge patches", v1alpha1.ManifestSyncSpec{
			Targets: []v1alpha1.Target{{Name: "a"}, {Name: "b", Patches: []v1alpha1.Patch{{Patch: "metadata: {labels: {a: b}}"}}}},
		}, false, ptr.To(true)},
		{"JSON6902 patches", v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "a", Patches: jsonPatch}}}, false, nil},
		{"a patch that is no YAML", v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{{Name: "a", Patches: []v1alpha1.Patch{{Patch: "a: [b"}}}}}, false, ptr.To(true)},
		// A hostile tenant's patch of dense flow YAML would take 100 times
		// its size parsed: past patchBytesInProcess it is parsed in a
		// worker, under its memory limit.
		{"patches too large to parse in process", v1alpha1.ManifestSyncSpec{Targets: []v1alpha1.Target{
			{Name: "a", Patches: []v1alpha1.Patch{{Patch: "[" + strings.Repeat("{op: add, path: /a, value: [[[[1]]]]},", 1000) + "]", Target: &v1alpha1.PatchSelector{Kind: "ConfigMap"}}}},
			{Name: "b", Patches: []v1alpha1.Patch{{Patch: "[" + strings.Repeat("{op: add, path: /a, value: [[[[1]]]]},", 1000) + "]", Target: &v1alpha1.PatchSelector{Kind: "ConfigMap"}}}},
		}}, true, nil},
		{"object sources only", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "one", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}},
			{Name: "set", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap"}},
		}}, false, nil},
		{"starlark", v1alpha1.ManifestSyncSpec{Transform: inline("def main(ctx):\n    return []\n")}, true, nil},
		{"cue", v1alpha1.ManifestSyncSpec{Transform: &v1alpha1.Transform{CUE: &v1alpha1.CUEProgramRef{ProgramRef: v1alpha1.ProgramRef{Inline: "objects: []"}}}}, true, nil},
		{"schemas of a source", v1alpha1.ManifestSyncSpec{Schemas: []v1alpha1.SchemaRef{{Builtin: "k8s"}, {Source: "repo", Path: "policies"}}}, true, nil},
		{"kustomize", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "x"}}, {Name: "base", Kustomize: &v1alpha1.KustomizeSource{Source: "repo"}}}}, true, nil},
		{"helm", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{{Name: "chart", Helm: &v1alpha1.HelmSource{Chart: "c", Repository: "https://example.com"}}}}, true, nil},
		{"git files passing through", v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}},
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "x"}},
		}}, true, nil},
	} {
		if got := needsWorker(&c.spec); got != needsWorkerIn(&c.spec, lean.Operator) {
			t.Errorf("%s: needsWorker %v, not as this build (lean %v) would", c.name, got, lean.Operator)
		}
		if got := needsWorkerIn(&c.spec, false); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		wantLean := c.want
		if c.wantLean != nil {
			wantLean = *c.wantLean
		}
		if got := needsWorkerIn(&c.spec, true); got != wantLean {
			t.Errorf("%s, lean: %v, want %v", c.name, got, wantLean)
		}
	}
}

// denseYAMLHeapBudget is how much the operator's heap may grow while a
// worker parses a git file of 8 MB of dense YAML: the snapshot (8 MB),
// its frame to the worker (base64 in JSON) and the test process's other
// work; parsed in the operator, the file costs about 800 MiB.
const denseYAMLHeapBudget = 96 << 20

// A git file that passes through is parsed in a worker, under its memory
// limit: 8 MB of dense flow maps, which take about 800 MiB to parse, fail
// their ManifestSync with the memory-limit error while the operator's
// heap grows by far less than the parse would take.
//
// What a hostile tenant gets: its own ManifestSync fails EvalFailed with
// the worker's limit; the operator holds the file's bytes, never its parse.
func TestGitDenseYAMLInWorker(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("runs a worker out of memory on purpose")
	}
	cache := gitOperator(t, git.Options{})
	ns := remoteEnv.Namespace(t, nil)

	content := t.TempDir()
	line := []byte("- {a: 1, b: [1, 2]}\n")
	dense := bytes.Repeat(line, 8_000_000/len(line)) // under the 8 MiB a file
	if err := os.WriteFile(filepath.Join(content, "dense.yaml"), dense, 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	gittest.Publish(t, root, "dense", content)
	url := gittest.Daemon(t, root) + "/dense.git"

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := gittest.HeapPeak()
	ms := newSync(ns, "dense", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: url}}},
		Params:  params(`{"evalWorker": true}`), // the test operator's pool (evaluators)
		Targets: targets(ns),
	})
	if err := remoteEnv.Client.Create(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonEvalFailed, time.Minute)
	peak := stop()
	const want = "evaluation exceeded its memory limit of 256 MiB"
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, want) {
		t.Errorf("%q; want the worker's limit %q", msg, want)
	}
	growth := int64(peak) - int64(before.HeapAlloc)
	t.Logf("the operator's heap: %d MiB before, peak %d MiB (growth %d MiB, budget %d MiB) for %d bytes of dense YAML",
		before.HeapAlloc>>20, peak>>20, growth>>20, denseYAMLHeapBudget>>20, len(dense))
	if growth > denseYAMLHeapBudget {
		t.Errorf("the heap grew by %d MiB while a worker parsed the file, over the budget of %d MiB", growth>>20, denseYAMLHeapBudget>>20)
	}
	// Deleted while its operator runs, so that no other test's operator
	// finds it and fetches its repository.
	deleteAndSweep(t, cache, []*v1alpha1.ManifestSync{ms})
}
