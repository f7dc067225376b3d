// Command evalbench is workload W3 of the benchmarks: one Starlark
// transform rendering ten objects for each of 1,000 namespaces. It runs,
// alternately and each as a process of its own, ManifestSync's engine
// (the transform once per target, as the operator runs it), the starlark
// command (go.starlark.net/cmd/starlark, at the version ManifestSync uses)
// running the same render function over the same namespaces and
// encoding every object to JSON, and the same logic written in plain Go,
// and prints a Markdown table of the medians with our ratio to each.
//
//	go run ./bench/evalbench -starlark bin/starlark -pairs 3
//
// The target: objects/s at least the starlark command's.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

//go:embed render.star
var renderStar []byte

const objectsPerNamespace = 10

func main() {
	var (
		starlarkBin = flag.String("starlark", "bin/starlark", "the starlark command, built from the go.starlark.net ManifestSync uses")
		namespaces  = flag.Int("n", 1000, "namespaces")
		pairs       = flag.Int("pairs", 3, "rounds; each runs every tool once, alternating")
		child       = flag.String("child", "", "internal: run one tool (engine or go) and exit")
		cpuprofile  = flag.String("cpuprofile", "", "with -child: write a CPU profile to this file")
	)
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "evalbench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if *child != "" {
		err = runChild(*child, *namespaces)
	} else {
		err = compare(*starlarkBin, *namespaces, *pairs)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "evalbench:", err)
		os.Exit(2)
	}
}

// params are every namespace's params: the same for all three tools.
var params = map[string]any{
	"name": "web", "team": "shop", "image": "registry.example.com/web:1.4.2",
	"replicas": 2, "port": 8080, "config": map[string]any{"LOG_LEVEL": "info", "FEATURE_X": true},
}

func compare(starlarkBin string, n, pairs int) error {
	dir, err := os.MkdirTemp("", "evalbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "baseline.star")
	if err := os.WriteFile(script, baselineScript(n), 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	tools := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"engine", func() *exec.Cmd { return exec.Command(self, "-child", "engine", "-n", strconv.Itoa(n)) }},
		{"starlark command", func() *exec.Cmd { return exec.Command(starlarkBin, script) }},
		{"plain Go", func() *exec.Cmd { return exec.Command(self, "-child", "go", "-n", strconv.Itoa(n)) }},
	}
	times := make([][]time.Duration, len(tools))
	for range pairs {
		for i, tool := range tools {
			d, err := timeRun(tool.cmd(), n*objectsPerNamespace)
			if err != nil {
				return fmt.Errorf("%s: %w", tool.name, err)
			}
			times[i] = append(times[i], d)
		}
	}
	objs := float64(n * objectsPerNamespace)
	fmt.Printf("W3: one Starlark transform, %d namespaces x %d objects, %d rounds\n\n", n, objectsPerNamespace, pairs)
	fmt.Printf("| tool | median wall | objects/s | engine speed / tool speed (min–max) |\n|---|---|---|---|\n")
	for i, tool := range tools {
		ratio := "—"
		if i > 0 {
			lo, hi := ratios(times[0], times[i])
			ratio = fmt.Sprintf("%.2f (%.2f–%.2f)", float64(median(times[i]))/float64(median(times[0])), lo, hi)
		}
		fmt.Printf("| %s | %s | %.0f | %s |\n", tool.name, median(times[i]).Round(time.Millisecond), objs/median(times[i]).Seconds(), ratio)
	}
	verdict := "PASS"
	if median(times[0]) > median(times[1]) {
		verdict = "FAIL"
	}
	fmt.Printf("\nW3 target (objects/s ≥ the starlark command's): %s\n", verdict)
	return nil
}

// ratios are the min and max over rounds of the speed-up of the engine
// against a tool: tool time / engine time.
func ratios(engine, tool []time.Duration) (lo, hi float64) {
	lo, hi = 1e9, 0
	for i := range engine {
		r := float64(tool[i]) / float64(engine[i])
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo, hi
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// timeRun runs cmd, which must print the number of objects it made.
func timeRun(cmd *exec.Cmd, want int) (time.Duration, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, out.String())
	}
	d := time.Since(start)
	if got := strings.TrimSpace(out.String()); got != strconv.Itoa(want) {
		return 0, fmt.Errorf("made %q objects, want %d", got, want)
	}
	return d, nil
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

func runChild(tool string, n int) error {
	switch tool {
	case "engine":
		return runEngine(n)
	case "go":
		count := 0
		for i := range n {
			for _, obj := range renderGo(fmt.Sprintf("ns-%d", i), params) {
				if _, err := json.Marshal(obj); err != nil {
					return err
				}
				count++
			}
		}
		fmt.Println(count)
		return nil
	}
	return fmt.Errorf("unknown tool %q", tool)
}

// runEngine evaluates a ManifestSync with n targets whose transform calls
// render for the target's namespace.
func runEngine(n int) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	spec := &v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: "https://git.example.com/app.git"}}},
		Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Source: "app", Path: "main.star"}},
		Params:    &runtime.RawExtension{Raw: raw},
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
		return err
	}
	if err := res.Err(); err != nil {
		return err
	}
	count := 0
	for _, t := range res.Targets {
		count += len(t.Objects)
	}
	fmt.Println(count)
	return nil
}
