package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestExamples evaluates every example under examples/ the way its README
// does (engine eval -f sync.yaml, sources beside it) and compares the output
// with the example's expected.yaml or, for an example that must fail, its
// expected.err (exit status 1 and what eval printed on stderr); engine vet
// of the example must exit the same way. With -update it rewrites them.
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
			code := run([]string{"eval", "-f", sync}, &stdout, &stderr)
			want, got, wantCode := filepath.Join(dir, "expected.yaml"), stdout.Bytes(), 0
			if _, err := os.Stat(filepath.Join(dir, "expected.err")); err == nil {
				want, got, wantCode = filepath.Join(dir, "expected.err"), stderr.Bytes(), 1
			}
			if code != wantCode {
				t.Fatalf("exit %d, want %d: %s", code, wantCode, stderr.String())
			}
			if *update {
				if err := os.WriteFile(want, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, got) {
				t.Errorf("output differs from %s (run go test ./cmd/engine -run TestExamples -update to rewrite):\n%s", want, got)
			}
			// engine vet agrees: a clean example has no findings, a
			// failing one has.
			stdout.Reset()
			stderr.Reset()
			if code := run([]string{"vet", dir}, &stdout, &stderr); code != wantCode {
				t.Errorf("engine vet %s: exit %d, want %d:\n%s%s", dir, code, wantCode, stdout.String(), stderr.String())
			}
		})
	}
}
