package cue

import (
	"testing"

	"github.com/manifestsync/manifestsync/bench/objects"
)

func BenchmarkValidate1000(b *testing.B)  { benchmarkValidate(b, 1000) }
func BenchmarkValidate10000(b *testing.B) { benchmarkValidate(b, 10000) }

// benchmarkValidate validates n distinct Deployments against the builtin
// k8s schemas per iteration; compare with `cue vet -d '#Deployment'
// schemas/k8s` over the same objects.
func benchmarkValidate(b *testing.B, n int) {
	k8s := builtin(b, "k8s")
	objs := make([]map[string]any, n)
	for i := range objs {
		objs[i] = objects.Deployment(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, obj := range objs {
			if _, vs, err := k8s.Validate(obj); err != nil || len(vs) > 0 {
				b.Fatal(err, vs)
			}
		}
	}
	perObject := float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
	b.ReportMetric(perObject, "ns/object")
	b.ReportMetric(1e9/perObject, "objects/s")
}
