// Package w4 is workload W4 of the benchmarks: schema validation by
// ManifestSync (lang/cue with the builtin k8s schemas) against `cue vet`
// validating the same Deployments against the same schemas. Each side is a
// process of its own that reads one YAML stream of n objects; rows give
// objects per second and peak RSS, with our ratios to cue vet's.
//
// The target: at least as fast as cue vet with at most half its memory.
// It imports no cluster code.
package w4

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/bench/objects"
	"github.com/manifestsync/manifestsync/lang/cue"
)

const workload = "W4 validation"

// Counts are the object counts validated.
var Counts = []int{1000, 10000}

func init() { harness.RegisterChild("w4", child) }

// Run compares lang/cue with cueBin vet on the schemas of dir schemas,
// rounds times each count, alternating.
func Run(_ context.Context, cueBin, schemas string, rounds int) ([]harness.Row, error) {
	version, err := sameVersion(cueBin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", workload, err)
	}
	if schemas, err = filepath.Abs(schemas); err != nil {
		return nil, err
	}
	if strings.ContainsRune(cueBin, filepath.Separator) {
		if cueBin, err = filepath.Abs(cueBin); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "w4")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var rows []harness.Row
	for _, n := range Counts {
		file := filepath.Join(dir, fmt.Sprintf("objects-%d.yaml", n))
		if err := writeObjects(file, n); err != nil {
			return nil, err
		}
		var rss, anon [2][]float64
		side := func(i int, cmd func() (*exec.Cmd, error)) func() (float64, error) {
			return func() (float64, error) {
				c, err := cmd()
				if err != nil {
					return 0, err
				}
				c.Dir = schemas
				p, err := harness.RunProcess(c)
				if err != nil {
					return 0, err
				}
				rss[i] = append(rss[i], float64(p.RSS)/(1<<20))
				anon[i] = append(anon[i], float64(p.Anon)/(1<<20))
				return float64(n) / p.Wall.Seconds(), nil
			}
		}
		runs, err := harness.Rounds(rounds,
			side(0, func() (*exec.Cmd, error) { return harness.ChildCommand("w4", file) }),
			side(1, func() (*exec.Cmd, error) { return exec.Command(cueBin, "vet", "-d", "#Deployment", ".", file), nil }),
		)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", workload, err)
		}
		base := "cue vet (CUE " + version + ")"
		speed := harness.Compare(workload, fmt.Sprintf("throughput, %d objects", n), "objects/s", runs[0], runs[1], base, "≥ 1× cue vet",
			func(r float64) bool { return r >= 1 })
		mem := harness.Compare(workload, fmt.Sprintf("peak RSS, %d objects", n), "MiB", rss[0], rss[1], base, "≤ 0.5× cue vet",
			func(r float64) bool { return r <= 0.5 })
		if !speed.Pass {
			speed.Note = "both sides run the same CUE evaluator; the difference is per-object unification with the schema"
		}
		heap := harness.Compare(workload, fmt.Sprintf("peak anonymous memory (RssAnon), %d objects", n), "MiB", anon[0], anon[1], base, "reported", nil)
		if !mem.Pass {
			mem.Note = fmt.Sprintf("the resident set includes the pages of each side's executable, which this machine's kernel maps whole (large folios): "+
				"our side is the benchmark binary (%.0f MiB on disk, client-go and controller-runtime linked in); "+
				"of what the programs allocate (RssAnon) ours peaks at %.1f MiB, cue vet's at %.1f MiB", exeMiB(), heap.Ours, heap.Base)
		}
		rows = append(rows, speed, mem, heap)
	}
	return rows, nil
}

// exeMiB is the size of this executable, which the W4 child runs as.
func exeMiB() float64 {
	exe, err := os.Executable()
	if err != nil {
		return 0
	}
	fi, err := os.Stat(exe)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// sameVersion checks that the cue binary is the CUE version this program
// is built with, so that both sides run the same evaluator.
func sameVersion(cueBin string) (string, error) {
	out, err := exec.Command(cueBin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w (build it with make bench)", cueBin, err)
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
		return "", fmt.Errorf("%s is not CUE %s:\n%s", cueBin, want, out)
	}
	return want, nil
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

// child validates every object of the file args[0] against the builtin
// k8s schemas, as the engine does for each output object, and fails on
// the first violation.
func child(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: w4 FILE")
	}
	f, err := os.Open(args[0])
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
