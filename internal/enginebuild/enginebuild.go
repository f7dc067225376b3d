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
//
// The image ships two programs (Image): /engine, the lean engine (the tag
// LeanTag, internal/lean), which links no evaluator, and /engine-worker
// (cmd/engine-worker), the evaluators alone, which the lean engine starts
// for every evaluation. bin/engine (Command, make build) is the full
// engine, which evaluates in copies of itself and runs every command
// (engine fmt of CUE files included) on its own.
package enginebuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Tags are the build tags of the engine binary and of its worker.
const Tags = "kustomize_disable_go_plugin_support"

// LeanTag is the build tag of the image's engine, which leaves out the
// evaluators (internal/lean).
const LeanTag = "leanoperator"

// Command is `go build` of ./cmd/engine of the module at dir into out,
// the full engine (make build's bin/engine), static and with Tags, and
// extra go build flags before the package.
func Command(ctx context.Context, dir, out string, extra ...string) *exec.Cmd {
	return build(ctx, dir, out, "./cmd/engine", Tags, extra)
}

// ImageCommands are the `go build`s of the image's two programs into the
// directory out, with extra go build flags before the package (hack/image
// adds its -ldflags, GOOS and GOARCH): the lean engine (out/engine) and
// its worker (out/engine-worker).
func ImageCommands(ctx context.Context, dir, out string, extra ...string) []*exec.Cmd {
	return []*exec.Cmd{
		build(ctx, dir, filepath.Join(out, "engine"), "./cmd/engine", Tags+","+LeanTag, extra),
		build(ctx, dir, filepath.Join(out, "engine-worker"), "./cmd/engine-worker", Tags, extra),
	}
}

// ProgramsEnv names a directory that holds the image's two programs as
// `hack/image compile -o DIR` leaves them, one directory per platform
// (DIR/linux-amd64/engine and engine-worker). make test builds them so
// right before `go test` and sets it: the tests that start the image's
// engine (the soak, bench W9 and W11, the image's own test) then link
// none of their own, which spares make test a minute of linking. Outside
// make test nothing sets it, and each builds what its tree holds.
const ProgramsEnv = "MANIFESTSYNC_IMAGE_PROGRAMS"

// Programs is the directory of this machine's platform under
// ProgramsEnv, or "" when the variable is unset. A directory that is
// named but lacks a program is an error: make test built it.
func Programs() (string, error) {
	root := os.Getenv(ProgramsEnv)
	if root == "" {
		return "", nil
	}
	dir := filepath.Join(root, runtime.GOOS+"-"+runtime.GOARCH)
	for _, name := range []string{"engine", "engine-worker"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s=%s: no program %s for %s/%s (hack/image compile -o %s builds them): %v", ProgramsEnv, root, name, runtime.GOOS, runtime.GOARCH, root, err)
		}
	}
	return dir, nil
}

// Image builds the image's two programs into the directory out (see
// ImageCommands) and returns the engine's path: what measures or tests
// the operator as the image runs it builds and starts this. Under make
// test (ProgramsEnv) it copies the ones built before the tests instead.
func Image(ctx context.Context, dir, out string) (string, error) {
	prebuilt, err := Programs()
	if err != nil {
		return "", err
	}
	if prebuilt != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return "", err
		}
		// Copies, not links: the engine finds its worker beside the
		// file it runs from, and a test that removes out's worker must
		// find none.
		if err := os.CopyFS(out, os.DirFS(prebuilt)); err != nil {
			return "", fmt.Errorf("copying the programs of %s: %w", ProgramsEnv, err)
		}
		return filepath.Join(out, "engine"), nil
	}
	for _, cmd := range ImageCommands(ctx, dir, out) {
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%v: %w\n%s", cmd.Args, err, b)
		}
	}
	return filepath.Join(out, "engine"), nil
}

func build(ctx context.Context, dir, out, pkg, tags string, extra []string) *exec.Cmd {
	args := append([]string{"build", "-trimpath", "-tags", tags, "-o", out}, extra...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

// WorkerEnv is the environment variable that names the worker binary to
// the engine (worker.CommandEnv, which this package does not import).
const WorkerEnv = "MANIFESTSYNC_EVAL_WORKER"
