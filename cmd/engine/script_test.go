package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

var update = flag.Bool("update", false, "rewrite expected outputs")

func TestMain(m *testing.M) {
	testscript.Main(workerM{clusterM{m}}, map[string]func(){
		"engine": func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// workerM runs the tests with the CLI's evaluation workers started as the
// engine command testscript puts on $PATH: this test binary would run the
// tests again.
type workerM struct{ m testscript.TestingM }

func (w workerM) Run() int {
	exe, err := exec.LookPath(programName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "no %s on $PATH: %v\n", programName, err)
		return 1
	}
	workerCommand = []string{exe, "eval-worker"}
	// The commands cache charts and repositories under the user's cache
	// directory: the tests use one of their own, never the user's.
	cache, err := os.MkdirTemp("", "engine-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(cache)
	os.Setenv("XDG_CACHE_HOME", cache)
	return w.m.Run()
}

// TestScripts runs the CLI scenarios in testdata/script/*.txtar.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: *update,
		Cmds:          map[string]func(*testscript.TestScript, bool, []string){"exits": cmdExits},
	})
}

// cmdExits runs a program and checks its exit status: exits N PROG ARGS...
// Its stdout and stderr are then checked as exec's are.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}
