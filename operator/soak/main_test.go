package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/manifestsync/manifestsync/internal/enginebuild"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

var (
	// env is this cluster, remoteEnv the remote one.
	env, remoteEnv *testenv.Env
	// engineBin is bin/engine built for the test, once; built is closed
	// when it is ready (or buildErr says why not).
	engineBin string
	built     = make(chan struct{})
	buildErr  error
	buildTook time.Duration
)

func TestMain(m *testing.M) {
	flag.Parse()
	logf.SetLogger(logr.Discard())
	if !testing.Short() {
		dir, err := os.MkdirTemp("", "soak-engine-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// The build runs while the control planes start.
		go buildEngine(filepath.Join(dir, "engine"))
		code := testenv.Run(m, &env, testenv.Second(&remoteEnv))
		<-built
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}
	close(built)
	os.Exit(testenv.Run(m, &env))
}

// buildEngine builds cmd/engine into bin: the operator the test kills
// must be a process of its own.
func buildEngine(bin string) {
	defer close(built)
	start := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		buildErr = err
		return
	}
	cmd := enginebuild.Command(context.Background(), root, bin) // as the image builds it
	if out, err := cmd.CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build ./cmd/engine: %w\n%s", err, out)
		return
	}
	engineBin, buildTook = bin, time.Since(start)
}
