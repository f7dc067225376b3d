// Command image builds ManifestSync's container image without a container
// runtime and pushes it. `make image` runs `go run ./hack/image build`: it
// cross-builds a static engine per platform (CGO off, -trimpath, version
// and commit stamped), lays it over a base made here (CA certificates from
// Debian's ca-certificates, /etc/passwd and /etc/group with the nonroot
// user 65532, /tmp) and writes one index of linux/amd64 and linux/arm64 as
// an OCI layout under bin/image. Every timestamp is the commit's (or
// SOURCE_DATE_EPOCH), so two builds of one commit give one digest.
// `make image-push IMG=host/repo:tag` runs `go run ./hack/image push`.
//
// It is a build tool: nothing in the engine or the operator imports it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const usage = `usage:
  image build [-o DIR] [-platforms LIST] [-version V] [-source URL] [-licenses SPDX] [-ca FILE]
  image compile [-o DIR] [-platforms LIST]
  image push [-layout DIR] IMAGE
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "build":
		err = runBuild(ctx, args[1:], stdout, stderr)
	case "compile":
		err = runCompile(ctx, args[1:], stderr)
	case "push":
		err = runPush(ctx, args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	return 0
}

func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "bin/image", "directory of the OCI layout to write (replaced)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "platforms of the index, comma-separated")
	version := fs.String("version", "", "version to stamp and label (default: git describe --tags --always --dirty)")
	source := fs.String("source", defaultSource, "org.opencontainers.image.source label")
	licenses := fs.String("licenses", "NOASSERTION", "org.opencontainers.image.licenses label (an SPDX expression)")
	ca := fs.String("ca", defaultCABundle, "CA bundle to install (Debian's ca-certificates)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("build takes no arguments, got %q", fs.Args())
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	start := time.Now()
	meta, err := gitMeta(ctx, ".")
	if err != nil {
		return err
	}
	if *version != "" {
		meta.Version = *version
	}
	meta.Source, meta.Licenses = *source, *licenses

	binDir, err := os.MkdirTemp("", "manifestsync-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	bins, err := compileAll(ctx, binDir, plats, meta, stderr)
	if err != nil {
		return err
	}
	base, err := loadBase(*ca)
	if err != nil {
		return err
	}
	idx, err := assemble(meta, base, plats, bins)
	if err != nil {
		return err
	}
	if err := writeLayout(*out, idx, meta.Version); err != nil {
		return err
	}
	return describe(stdout, *out, idx, meta, time.Since(start))
}

// runCompile builds the engine for every platform exactly as build does.
// With -o it keeps the programs there, one directory per platform
// (DIR/linux-amd64/engine and engine-worker: what enginebuild.ProgramsEnv
// names); without, it throws them away and what it leaves is Go's build
// cache, full. make test runs it before the tests, so that the cold
// cross-builds (the longest step of a first run) happen in the open, with
// their progress shown, and not under a test's timeout, and so that the
// tests that run the image's engine take these programs instead of
// linking their own.
func runCompile(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("image compile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "platforms to build for, comma-separated")
	keep := fs.String("o", "", "directory to keep the programs in, one directory per platform (replaced)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("compile takes no arguments, got %q", fs.Args())
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return err
	}
	meta, err := gitMeta(ctx, ".")
	if err != nil {
		return err
	}
	if *keep != "" {
		// The programs of an earlier run stay, so that go build finds
		// them up to date and links nothing when nothing changed; the
		// directory of a platform left out now goes.
		if err := keepOnly(*keep, plats); err != nil {
			return err
		}
		_, err = compileAll(ctx, *keep, plats, meta, stderr)
		return err
	}
	binDir, err := os.MkdirTemp("", "manifestsync-compile-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	_, err = compileAll(ctx, binDir, plats, meta, stderr)
	return err
}

// keepOnly removes from dir what is not the directory of one of plats
// (compileAll's names). A dir that does not exist is fine.
func keepOnly(dir string, plats []v1.Platform) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, p := range plats {
		want[platformDir(p)] = true
	}
	for _, e := range entries {
		if !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// platformDir is the name of p's directory under compileAll's dir.
func platformDir(p v1.Platform) string { return strings.ReplaceAll(p.String(), "/", "-") }

// compileAll builds the engine and its worker for each platform into a
// directory under dir and returns the directories by platform. It says which build runs, every progressEvery
// while it does (a cold cross-build takes minutes), and how long each took.
func compileAll(ctx context.Context, dir string, plats []v1.Platform, meta Meta, stderr io.Writer) (map[string]string, error) {
	bins := map[string]string{}
	for _, p := range plats {
		bin := filepath.Join(dir, platformDir(p))
		what := "engine and engine-worker for " + p.String()
		fmt.Fprintf(stderr, "image: building %s\n", what)
		start := time.Now()
		stop := progress(stderr, what, start, progressEvery)
		err := compileEngine(ctx, ".", p, meta, bin)
		stop()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "image: built %s in %s\n", what, time.Since(start).Round(time.Second))
		bins[p.String()] = bin
	}
	return bins, nil
}

// progressEvery is how often a long build says it is still running.
const progressEvery = 30 * time.Second

// progress prints "image: still building WHAT (ELAPSED)" to w every
// period until the returned function is called.
func progress(w io.Writer, what string, start time.Time, period time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(w, "image: still building %s (%s)\n", what, time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("layout", "bin/image", "OCI layout `make image` wrote")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("push takes one image reference, as host/repo:tag")
	}
	ref, digest, err := push(ctx, *dir, fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s@%s\n", ref, digest)
	return nil
}
