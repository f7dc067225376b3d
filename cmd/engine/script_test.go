package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
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
	return w.m.Run()
}

// TestScripts runs the CLI scenarios in testdata/script/*.txtar.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: *update,
	})
}
