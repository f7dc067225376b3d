package w3

import "testing"

// BenchmarkEngine is the engine's side of W3 in process: the transform for
// 1,000 namespaces, ten objects each.
func BenchmarkEngine(b *testing.B) { benchmark(b, runEngine) }

// BenchmarkGo is the same logic in plain Go.
func BenchmarkGo(b *testing.B) { benchmark(b, runGo) }

func benchmark(b *testing.B, run func(namespaces int) (int, error)) {
	b.ReportAllocs()
	for b.Loop() {
		n, err := run(Namespaces)
		if err != nil {
			b.Fatal(err)
		}
		if n != Namespaces*objectsPerNamespace {
			b.Fatalf("made %d objects, want %d", n, Namespaces*objectsPerNamespace)
		}
	}
}
