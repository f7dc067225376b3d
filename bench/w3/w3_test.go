package w3

import "testing"

// BenchmarkEngine is the engine's side of W3 in process: the transform for
// 1,000 namespaces, ten objects each.
func BenchmarkEngine(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		n, err := runEngine(Namespaces)
		if err != nil {
			b.Fatal(err)
		}
		if n != Namespaces*objectsPerNamespace {
			b.Fatalf("made %d objects, want %d", n, Namespaces*objectsPerNamespace)
		}
	}
}

// BenchmarkGo is the same logic in plain Go.
func BenchmarkGo(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		n, err := runGo(Namespaces)
		if err != nil {
			b.Fatal(err)
		}
		if n != Namespaces*objectsPerNamespace {
			b.Fatalf("made %d objects, want %d", n, Namespaces*objectsPerNamespace)
		}
	}
}
