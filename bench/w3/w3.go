// Package w3 is workload W3 of the benchmarks: one Starlark transform
// rendering ten objects for each of 1,000 namespaces. It runs, alternately
// and each as a process of its own, ManifestSync's engine (the transform
// once per target, as the operator runs it: in a process set up as an
// eval worker sets itself up, worker.LimitProcess), the starlark command
// (go.starlark.net/cmd/starlark, at the version ManifestSync uses) running
// the same render function over the same namespaces and encoding every
// object to JSON, and the same logic written in plain Go.
//
// The target: objects/s at least the starlark command's; the gap to plain
// Go is reported. It imports no cluster code.
package w3

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/worker"
)

//go:embed render.star
var renderStar []byte

const (
	workload            = "W3 evaluation"
	objectsPerNamespace = 10
	// Namespaces is the number of targets the transform renders.
	Namespaces = 1000
)

func init() { harness.RegisterChild("w3", child) }

// params are every namespace's params: the same for all three tools.
var params = map[string]any{
	"name": "web", "team": "shop", "image": "registry.example.com/web:1.4.2",
	"replicas": 2, "port": 8080, "config": map[string]any{"LOG_LEVEL": "info", "FEATURE_X": true},
}

// Run measures the engine, the starlark command starlarkBin and plain Go,
// rounds times each, alternating. Each measurement runs the tool twice, for
// every namespace and for none: objects/s of the evaluation is the objects
// over the difference, so that neither side's process start (a few
// milliseconds for the starlark command, tens for the engine's larger
// binary) counts as evaluation; the whole-process rate is reported too.
func Run(_ context.Context, starlarkBin string, rounds int) ([]harness.Row, error) {
	dir, err := os.MkdirTemp("", "w3")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	scripts := map[int]string{}
	for _, n := range []int{0, Namespaces} {
		scripts[n] = filepath.Join(dir, fmt.Sprintf("baseline-%d.star", n))
		if err := os.WriteFile(scripts[n], baselineScript(n), 0o644); err != nil {
			return nil, err
		}
	}
	objs := Namespaces * objectsPerNamespace
	child := func(tool string) func(int) (*exec.Cmd, error) {
		return func(n int) (*exec.Cmd, error) {
			return harness.ChildCommand("w3", "-tool", tool, "-n", strconv.Itoa(n))
		}
	}
	tools := []struct {
		name string
		cmd  func(n int) (*exec.Cmd, error)
	}{
		{"engine", child("engine")},
		{"starlark command", func(n int) (*exec.Cmd, error) { return exec.Command(starlarkBin, scripts[n]), nil }},
		{"plain Go", child("go")},
	}
	run := func(name string, cmd func(int) (*exec.Cmd, error), n int) (time.Duration, error) {
		c, err := cmd(n)
		if err != nil {
			return 0, err
		}
		p, err := harness.RunProcess(c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if got, want := strings.TrimSpace(string(p.Output)), strconv.Itoa(n*objectsPerNamespace); got != want {
			return 0, fmt.Errorf("%s: made %q objects, want %s", name, got, want)
		}
		return p.Wall, nil
	}
	whole := make([][]float64, len(tools)) // objects/s of the whole process
	var fns []func() (float64, error)
	for i, t := range tools {
		fns = append(fns, func() (float64, error) {
			all, err := run(t.name, t.cmd, Namespaces)
			if err != nil {
				return 0, err
			}
			start, err := run(t.name, t.cmd, 0)
			if err != nil {
				return 0, err
			}
			whole[i] = append(whole[i], float64(objs)/all.Seconds())
			return float64(objs) / max(all-start, time.Millisecond).Seconds(), nil
		})
	}
	runs, err := harness.Rounds(rounds, fns[0], fns[1:]...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", workload, err)
	}
	metric := fmt.Sprintf("objects/s (%d namespaces × %d objects, process start subtracted)", Namespaces, objectsPerNamespace)
	rows := []harness.Row{
		harness.Compare(workload, metric, "objects/s", runs[0], runs[1], "starlark command", "≥ 1× starlark command",
			func(r float64) bool { return r >= 1 }),
		harness.Compare(workload, metric, "objects/s", runs[0], runs[2], "plain Go", "gap reported", nil),
		harness.Compare(workload, fmt.Sprintf("objects/s (%d namespaces × %d objects, whole process)", Namespaces, objectsPerNamespace),
			"objects/s", whole[0], whole[1], "starlark command", "reported", nil),
	}
	if !rows[0].Pass {
		rows[0].Note = "the engine also normalises, sorts and digests every object and converts it to Go values, which the starlark command does not"
	}
	return rows, nil
}

// baselineScript is render.star with a driver that renders every
// namespace and encodes each object, as the engine's output is encoded.
func baselineScript(n int) []byte {
	p, _ := json.Marshal(params)
	return fmt.Appendf(slices.Clone(renderStar), `
PARAMS = json.decode(%q)

def run():
    count = 0
    for i in range(%d):
        for obj in render("ns-%%d" %% i, PARAMS):
            json.encode(obj)
            count += 1
    print(count)

run()
`, string(p), n)
}

// heapProfile is the child's -memprofile.
var heapProfile string

// child is the process of one tool: engine or go.
func child(args []string) error {
	fs := flag.NewFlagSet("w3", flag.ContinueOnError)
	tool := fs.String("tool", "engine", "engine or go")
	n := fs.Int("n", Namespaces, "namespaces")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	fs.StringVar(&heapProfile, "memprofile", "", "write a heap profile to this file while the engine's result is live")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var (
		count int
		err   error
	)
	switch {
	case *tool != "engine" && *tool != "go":
		err = fmt.Errorf("unknown tool %q", *tool)
	case *n == 0:
		// Only the process start, which Run subtracts.
	case *tool == "engine":
		// As the operator runs it: in an eval worker's process.
		if _, err = worker.LimitProcess(worker.DefaultMemoryLimit); err == nil {
			count, err = runEngine(*n)
		}
	default:
		count, err = runGo(*n)
	}
	if err != nil {
		return err
	}
	fmt.Println(count)
	return nil
}

func runGo(n int) (int, error) {
	count := 0
	for i := range n {
		for _, obj := range renderGo(fmt.Sprintf("ns-%d", i), params) {
			if _, err := json.Marshal(obj); err != nil {
				return 0, err
			}
			count++
		}
	}
	return count, nil
}

// runEngine evaluates a ManifestSync with n targets whose transform calls
// render for the target's namespace.
func runEngine(n int) (int, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return 0, err
	}
	spec := &v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: "https://git.example.com/app.git"}}},
		Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Source: "app", Path: "main.star"}},
		Params:    &k8sruntime.RawExtension{Raw: raw},
	}
	for i := range n {
		spec.Targets = append(spec.Targets, v1alpha1.Target{Name: fmt.Sprintf("t%d", i), Namespace: fmt.Sprintf("ns-%d", i)})
	}
	files := map[string][]byte{
		"render.star": renderStar,
		"main.star":   []byte("load(\"render.star\", \"render\")\n\ndef main(ctx):\n    return render(ctx.target.namespace, ctx.params)\n"),
	}
	snaps := map[string]*engine.Snapshot{"app": {Files: files, Revision: engine.ContentDigest(files)}}
	res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: spec, Snapshots: snaps}, engine.Options{})
	if err != nil {
		return 0, err
	}
	if err := res.Err(); err != nil {
		return 0, err
	}
	count := 0
	for _, t := range res.Targets {
		count += len(t.Objects)
	}
	if heapProfile != "" {
		f, err := os.Create(heapProfile)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		runtime.GC()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			return 0, err
		}
	}
	runtime.KeepAlive(res)
	return count, nil
}
