package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestExamples evaluates every example under examples/ the way its README
// does (engine eval -f sync.yaml, sources beside it) and compares the output
// with the example's expected.yaml. With -update it rewrites expected.yaml.
func TestExamples(t *testing.T) {
	syncs, err := filepath.Glob("../../examples/*/sync.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(syncs) < 2 {
		t.Fatalf("found %d examples, want at least 2", len(syncs))
	}
	for _, sync := range syncs {
		dir := filepath.Dir(sync)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"eval", "-f", sync}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			want := filepath.Join(dir, "expected.yaml")
			if *update {
				if err := os.WriteFile(want, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, stdout.Bytes()) {
				t.Errorf("output differs from %s (run go test ./cmd/engine -run TestExamples -update to rewrite):\n%s", want, stdout.String())
			}
		})
	}
}
