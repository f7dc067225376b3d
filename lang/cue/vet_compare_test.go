package cue

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestCompareCueVet compares validating the benchmark's Deployments, read
// from one YAML stream, against the builtin k8s schemas with `cue vet`
// doing the same: wall time and peak RSS of each process. It runs only
// when CUE_VET names a cue binary of the same CUE version, e.g.
//
//	go build -C hack/tools/cue -o $PWD/bin/cue cuelang.org/go/cmd/cue
//	CUE_VET=$PWD/bin/cue go test ./lang/cue -run CompareCueVet -v
//
// COMPARE_OBJECTS sets the counts (default "1000 10000").
func TestCompareCueVet(t *testing.T) {
	cue := os.Getenv("CUE_VET")
	if cue == "" {
		t.Skip("CUE_VET is not set")
	}
	counts := []int{1000, 10000}
	if s := os.Getenv("COMPARE_OBJECTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		counts = []int{n}
	}
	schemasDir, err := filepath.Abs(filepath.Join("..", "..", "schemas", "k8s"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range counts {
		file := filepath.Join(t.TempDir(), "objects.yaml")
		var buf bytes.Buffer
		for i := range n {
			buf.WriteString("---\n")
			data, err := yaml.Marshal(benchDeployment(i))
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(data)
		}
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		vet := exec.Command(cue, "vet", "-d", "#Deployment", ".", file)
		vet.Dir = schemasDir
		vetTime, vetRSS := run(t, vet)
		self := exec.Command(os.Args[0], "-test.run=^TestCompareCueVetChild$")
		self.Env = append(os.Environ(), "COMPARE_CHILD_FILE="+file)
		ourTime, ourRSS := run(t, self)
		t.Logf("%d objects: cue vet %v (%.0f objects/s), peak RSS %d MiB; lang/cue %v (%.0f objects/s), peak RSS %d MiB",
			n, vetTime, float64(n)/vetTime.Seconds(), vetRSS>>20, ourTime, float64(n)/ourTime.Seconds(), ourRSS>>20)
		if ourTime > vetTime || ourRSS > vetRSS/2 {
			t.Errorf("%d objects: want at most cue vet's time and half its memory", n)
		}
	}
}

// run runs cmd and returns its wall time and peak RSS in bytes.
func run(t *testing.T, cmd *exec.Cmd) (time.Duration, int64) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out.Bytes())
	}
	return time.Since(start), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// TestCompareCueVetChild is the validating process of TestCompareCueVet.
func TestCompareCueVetChild(t *testing.T) {
	file := os.Getenv("COMPARE_CHILD_FILE")
	if file == "" {
		t.Skip("run by TestCompareCueVet")
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k8s := builtin(t, "k8s")
	dec := yaml.NewDecoder(f)
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, vs, err := k8s.Validate(obj); err != nil || len(vs) > 0 {
			t.Fatal(err, vs)
		}
	}
}
