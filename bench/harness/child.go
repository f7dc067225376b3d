package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// childEnv names the child a re-executed benchmark binary runs.
const childEnv = "MANIFESTSYNC_BENCH_CHILD"

var children = map[string]func(args []string) error{}

// RegisterChild registers main as a child process of a workload: the
// benchmark binary re-executed by ChildCommand, so that a measured side
// runs in a process of its own (its own heap, its own peak RSS).
// Workload packages call it from init.
func RegisterChild(name string, main func(args []string) error) {
	children[name] = main
}

// ChildMain runs the registered child this process was started as, and
// exits; it returns at once in the parent. Call it first in main.
func ChildMain() {
	name := os.Getenv(childEnv)
	if name == "" {
		return
	}
	main, ok := children[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: unknown child %q\n", name)
		os.Exit(2)
	}
	if err := main(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// ChildCommand is a command that runs the registered child name with args.
func ChildCommand(name string, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), childEnv+"="+name)
	return cmd, nil
}

// Process is one measured run of a command.
type Process struct {
	Wall   time.Duration
	RSS    int64 // peak resident set, bytes
	Output []byte
}

// RunProcess runs cmd to its end and returns its wall time, peak RSS and
// combined output.
func RunProcess(cmd *exec.Cmd) (Process, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return Process{}, fmt.Errorf("%s: %w\n%s", cmd, err, out.Bytes())
	}
	wall := time.Since(start)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return Process{}, errors.New("no resource usage on this platform")
	}
	return Process{Wall: wall, RSS: ru.Maxrss << 10, Output: out.Bytes()}, nil // Maxrss is in KiB on Linux
}
