// Package enginebuild builds the engine binary as the image ships it, for
// the Makefile's peers that build one of their own: the demo, the soak
// test and the benchmarks, so that what they run and measure is what
// users run.
//
// Two settings make the difference (measured on an idle `engine
// operator`, bench notes in bench/REPORT.md):
//
//   - CGO_ENABLED=0 and -trimpath: a static binary, as hack/image builds
//     it (which also lets these builds reuse the packages `make test`'s
//     image compile has built).
//   - The build tag kustomize_disable_go_plugin_support: kustomize's
//     plugin loader imports the Go package plugin, and a program that can
//     load plugins (plugin linked, and cgo on) is linked as a dynamic Go
//     program: every exported method of every reachable type is kept and
//     every symbol exported, which made bin/engine 151 MB instead of
//     119 MB and its idle operator's resident set 97 MiB instead of 78.
//     The engine never loads a Go plugin (krusty's default options
//     disable plugins), so nothing is lost.
package enginebuild

import (
	"context"
	"os"
	"os/exec"
)

// Tags are the build tags of the engine binary.
const Tags = "kustomize_disable_go_plugin_support"

// Command is `go build` of ./cmd/engine of the module at dir into out,
// with the image's settings (hack/image adds its -ldflags, GOOS and
// GOARCH) and extra go build flags before the package.
func Command(ctx context.Context, dir, out string, extra ...string) *exec.Cmd {
	return build(ctx, dir, out, "./cmd/engine", extra)
}

// WorkerCommand is Command for ./cmd/engine-worker, the evaluation worker
// the image ships beside the engine (and names in
// MANIFESTSYNC_EVAL_WORKER): what measures the operator as the image runs
// it builds both.
func WorkerCommand(ctx context.Context, dir, out string, extra ...string) *exec.Cmd {
	return build(ctx, dir, out, "./cmd/engine-worker", extra)
}

func build(ctx context.Context, dir, out, pkg string, extra []string) *exec.Cmd {
	args := append([]string{"build", "-trimpath", "-tags", Tags, "-o", out}, extra...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// WorkerEnv is the environment variable that names the worker binary to
// the engine (worker.CommandEnv, which this package does not import).
const WorkerEnv = "MANIFESTSYNC_EVAL_WORKER"
