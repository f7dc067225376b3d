// Command cuevet compares schema validation by ManifestSync (lang/cue with
// the builtin k8s schemas) with `cue vet` validating the same Deployments
// against the same schemas, in one run: each side is a process of its own
// that reads one YAML stream of n objects, and the report gives its wall
// time, objects per second and peak RSS, with our ratios to cue vet's.
//
//	go run ./bench/cuevet -cue bin/cue -n 1000,10000
//
// The target: at least as fast as cue vet with at most half its memory.
// It exits 1 when a run misses it, 2 when the comparison cannot run.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/bench/objects"
	"github.com/manifestsync/manifestsync/lang/cue"
)

func main() {
	var (
		cueBin  = flag.String("cue", "bin/cue", "the cue binary, built from the CUE version ManifestSync uses")
		schemas = flag.String("schemas", "schemas/k8s", "the directory of the builtin k8s schemas")
		counts  = flag.String("n", "1000,10000", "comma-separated object counts")
		child   = flag.String("child", "", "internal: validate the objects of this YAML file and exit")
	)
	flag.Parse()
	if *child != "" {
		if err := validate(*child); err != nil {
			fmt.Fprintln(os.Stderr, "cuevet:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := compare(*cueBin, *schemas, *counts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuevet:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// measurement is one process's run.
type measurement struct {
	wall time.Duration
	rss  int64 // peak resident set, bytes
}

func (m measurement) rate(n int) float64 { return float64(n) / m.wall.Seconds() }

func compare(cueBin, schemas, counts string) (bool, error) {
	self, err := os.Executable()
	if err != nil {
		return false, err
	}
	if err := sameVersion(cueBin); err != nil {
		return false, err
	}
	dir, err := os.MkdirTemp("", "cuevet")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)

	fmt.Printf("schema validation of n Deployments against the builtin k8s schemas (%s)\n\n", schemas)
	fmt.Printf("%8s  %-10s %10s %12s %10s   %s\n", "objects", "tool", "wall", "objects/s", "peak RSS", "vs cue vet")
	allOK := true
	for _, s := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return false, fmt.Errorf("-n: bad count %q", s)
		}
		file := filepath.Join(dir, fmt.Sprintf("objects-%d.yaml", n))
		if err := writeObjects(file, n); err != nil {
			return false, err
		}
		vet, err := measure(exec.Command(cueBin, "vet", "-d", "#Deployment", ".", file), schemas)
		if err != nil {
			return false, err
		}
		ours, err := measure(exec.Command(self, "-child", file), "")
		if err != nil {
			return false, err
		}
		speed := ours.rate(n) / vet.rate(n)
		mem := float64(ours.rss) / float64(vet.rss)
		ok := speed >= 1 && mem <= 0.5
		allOK = allOK && ok
		verdict := "meets the target (speed >= 1x, memory <= 0.5x)"
		if !ok {
			verdict = "MISSES the target (speed >= 1x, memory <= 0.5x)"
		}
		fmt.Printf("%8d  %-10s %10s %12.0f %8d MiB\n", n, "cue vet", vet.wall.Round(time.Millisecond), vet.rate(n), vet.rss>>20)
		fmt.Printf("%8d  %-10s %10s %12.0f %8d MiB   speed %.2fx, memory %.2fx: %s\n", n, "lang/cue", ours.wall.Round(time.Millisecond), ours.rate(n), ours.rss>>20, speed, mem, verdict)
	}
	return allOK, nil
}

// sameVersion checks that the cue binary is the CUE version this program
// is built with, so that both sides run the same evaluator.
func sameVersion(cueBin string) error {
	out, err := exec.Command(cueBin, "version").Output()
	if err != nil {
		return fmt.Errorf("%s version: %w (build it with make bench)", cueBin, err)
	}
	want := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "cuelang.org/go" {
				want = d.Version
			}
		}
	}
	if want == "" || !strings.Contains(string(out), "cue version "+want) {
		return fmt.Errorf("%s is not CUE %s:\n%s", cueBin, want, out)
	}
	fmt.Printf("cue vet and lang/cue: CUE %s\n", want)
	return nil
}

// writeObjects writes n distinct Deployments as one YAML stream.
func writeObjects(file string, n int) error {
	var buf bytes.Buffer
	for i := range n {
		buf.WriteString("---\n")
		b, err := yaml.Marshal(objects.Deployment(i))
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// measure runs cmd in dir and returns its wall time and peak RSS.
func measure(cmd *exec.Cmd, dir string) (measurement, error) {
	var out bytes.Buffer
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return measurement{}, fmt.Errorf("%s: %w\n%s", cmd, err, out.Bytes())
	}
	wall := time.Since(start)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return measurement{}, errors.New("no resource usage on this platform")
	}
	return measurement{wall: wall, rss: ru.Maxrss << 10}, nil // Maxrss is in KiB on Linux
}

// validate is the child process: it validates every object of file
// against the builtin k8s schemas, as the engine does for each output
// object, and fails on the first violation.
func validate(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	k8s, err := cue.Builtin("k8s")
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(f)
	for i := 0; ; i++ {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, vs, err := k8s.Validate(obj); err != nil {
			return fmt.Errorf("object %d: %w", i, err)
		} else if len(vs) > 0 {
			return fmt.Errorf("object %d: %v", i, vs)
		}
	}
}
