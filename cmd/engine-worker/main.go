// Command engine-worker is the evaluation worker alone: what `engine
// eval-worker` runs, in a binary that links the evaluators (Starlark, CUE,
// kustomize, Helm's template engine) and not the operator, the CLI or the
// Kubernetes clients of bin/engine. The image ships it beside /engine and
// names it in MANIFESTSYNC_EVAL_WORKER, so that every worker the operator
// starts maps a smaller executable: an idle worker's resident set is about
// a third smaller (bench/REPORT.md, W12). It speaks the worker protocol
// (engine/worker) on stdin and stdout until stdin closes; `engine-worker
// version` prints what it was built from, as `engine version` does.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/manifestsync/manifestsync/engine/worker"
	helmrender "github.com/manifestsync/manifestsync/helm"
)

// version and commit are set at build time, as for bin/engine:
// -ldflags "-X main.version=v0.1.0 -X main.commit=<git commit>".
var (
	version = ""
	commit  = ""
)

func main() {
	switch {
	case len(os.Args) == 1:
		if err := worker.ServeStdioWith(worker.ServeOptions{Helm: helmrender.Renderer{}, Stuck: helmrender.Stuck}); err != nil {
			fmt.Fprintln(os.Stderr, "engine-worker:", err)
			os.Exit(1)
		}
	case len(os.Args) == 2 && os.Args[1] == "version":
		fmt.Println(versionLine())
	default:
		fmt.Fprintln(os.Stderr, "usage: engine-worker (serves the evaluation worker protocol on stdin and stdout; the operator and the engine's offline commands start it)\n       engine-worker version")
		os.Exit(2)
	}
}

// versionLine reads "engine-worker VERSION [commit COMMIT] GOVERSION
// OS/ARCH", as bin/engine's.
func versionLine() string {
	v, c := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if c == "" && s.Key == "vcs.revision" {
				c = s.Value
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	line := "engine-worker " + v
	if c != "" {
		line += " commit " + c
	}
	return fmt.Sprintf("%s %s %s/%s", line, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
