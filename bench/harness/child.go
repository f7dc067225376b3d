package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	Wall time.Duration
	RSS  int64 // peak resident set, bytes
	// Anon is the peak of the anonymous part of the resident set (heap,
	// stacks: what the program allocated, not the pages of its binary),
	// sampled every sampleInterval; 0 where /proc cannot tell.
	Anon   int64
	Output []byte
}

// sampleInterval is how often RunProcess reads a process's memory.
const sampleInterval = 5 * time.Millisecond

// RunProcess runs cmd to its end and returns its wall time, peak RSS and
// combined output.
func RunProcess(cmd *exec.Cmd) (Process, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Process{}, fmt.Errorf("%s: %w", cmd, err)
	}
	done := make(chan struct{})
	anon := make(chan int64, 1)
	go func() {
		var peak int64
		tick := time.NewTicker(sampleInterval)
		defer tick.Stop()
		for {
			if n, err := ProcStatus(cmd.Process.Pid, "RssAnon"); err == nil {
				peak = max(peak, n)
			}
			select {
			case <-done:
				anon <- peak
				return
			case <-tick.C:
			}
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	close(done)
	p := Process{Wall: wall, Anon: <-anon, Output: out.Bytes()}
	if err != nil {
		return Process{}, fmt.Errorf("%s: %w\n%s", cmd, err, out.Bytes())
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return Process{}, errors.New("no resource usage on this platform")
	}
	p.RSS = ru.Maxrss << 10 // Maxrss is in KiB on Linux
	return p, nil
}

// ProcStatus reads a memory field of /proc/PID/status, such as VmRSS,
// VmHWM or RssAnon, in bytes.
func ProcStatus(pid int, field string) (int64, error) {
	return procField(pid, "status", field)
}

// ProcPss is the proportional set size of process pid, in bytes: its
// resident pages, each shared page divided among the processes that map
// it (/proc/PID/smaps_rollup), so that the file-backed pages of one
// executable run as several processes count once in their sum, as the
// memory of a pod holding them counts them.
func ProcPss(pid int) (int64, error) {
	return procField(pid, "smaps_rollup", "Pss")
}

// procField reads field (in kB) of /proc/PID/file.
func procField(pid int, file, field string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/%s", field, pid, file)
}

// Descendants are the processes below pid (its children, theirs, and so
// on), from /proc.
func Descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := map[int]int{}
	for _, p := range stats {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		parent[self] = ppid
	}
	var out []int
	for child := range parent {
		for p := parent[child]; p > 1; p = parent[p] {
			if p == pid {
				out = append(out, child)
				break
			}
		}
	}
	return out
}
