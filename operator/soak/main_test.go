package soak

import (
	"context"
	"flag"
	"fmt"
	"os"
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
		go buildEngine(dir)
		code := testenv.Run(m, &env, testenv.Second(&remoteEnv))
		<-built
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}
	close(built)
	os.Exit(testenv.Run(m, &env))
}

// buildEngine builds the image's engine and its worker into dir
// (enginebuild.Image): the operator the test kills must be a process of
// its own, and is the lean one the image runs, which evaluates in the
// engine-worker beside it.
func buildEngine(dir string) {
	defer close(built)
	start := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		buildErr = err
		return
	}
	bin, err := enginebuild.Image(context.Background(), root, dir)
	if err != nil {
		buildErr = err
		return
	}
	engineBin, buildTook = bin, time.Since(start)
}
