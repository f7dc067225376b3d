package main

import "testing"

// A benchmark run keeps the report's fault soak section, which make soak
// fills, and nothing else of the old report.
func TestSoakSection(t *testing.T) {
	old := "# ManifestSync benchmarks\n\n| old row |\n\n## Fault soak (make soak)\n\n| fault | injected |\n"
	if got, want := string(soakSection([]byte(old))), "\n## Fault soak (make soak)\n\n| fault | injected |\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := soakSection([]byte("# ManifestSync benchmarks\n| row |\n")); got != nil {
		t.Errorf("a report without the section gave %q", got)
	}
}
