package fanout

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/bench/harness"
)

const w1 = "W1 fan-out"

// Updates is the number of source updates of each round of W1.
const Updates = 10

// kubectlUpdates is the number of applies of kubectl per round: each
// takes seconds, so fewer than ours.
const kubectlUpdates = 1

// Lags are every per-target lag W1 saw, by side, for the chart.
type Lags struct {
	Ours, Floor, Kubectl []float64 // ms
}

// W1 updates the source Updates times per round and times every copy,
// alternating with the floor and kubectl doing the same writes.
func (f *Fixture) W1(ctx context.Context, rounds int) ([]harness.Row, *Lags, []string, error) {
	lags := &Lags{}
	var p50, p99 [3][]float64
	record := func(side int, all []time.Duration, into *[]float64) {
		for _, d := range all {
			*into = append(*into, harness.Ms(d))
		}
		p50[side] = append(p50[side], harness.Ms(harness.Percentile(all, 50)))
		p99[side] = append(p99[side], harness.Ms(harness.Percentile(all, 99)))
	}
	ours := func() (float64, error) {
		span, all, err := f.updateOurs(ctx)
		if err != nil {
			return 0, err
		}
		record(0, all, &lags.Ours)
		return span, nil
	}
	floor := func() (float64, error) {
		var spans []float64
		var all []time.Duration
		for range Updates {
			f.version++
			v := fmt.Sprintf("v%d", f.version)
			wv := f.watcher.expect(floorName, v)
			if err := parallel(ctx, f.ns, func(ns string) error {
				_, err := f.cs.CoreV1().Secrets(ns).Apply(ctx, secretApply(ns, floorName, "bench-floor", v), metav1.ApplyOptions{FieldManager: "bench-floor", Force: true})
				return err
			}); err != nil {
				return 0, fmt.Errorf("floor: %w", err)
			}
			got, err := wv.wait(ctx)
			if err != nil {
				return 0, fmt.Errorf("floor: %w", err)
			}
			all = append(all, got...)
			spans = append(spans, harness.Ms(maxOf(got)))
			time.Sleep(200 * time.Millisecond)
		}
		record(1, all, &lags.Floor)
		return harness.Median(spans), nil
	}
	sides := []func() (float64, error){floor}
	if f.kubectl != "" {
		sides = append(sides, func() (float64, error) {
			var spans []float64
			var all []time.Duration
			for range kubectlUpdates {
				f.version++
				v := fmt.Sprintf("v%d", f.version)
				file := filepath.Join(f.dir, "kubectl.yaml")
				if err := f.writeKubectlFile(file, v); err != nil {
					return 0, err
				}
				wv := f.watcher.expect(kubectlNm, v)
				cmd := exec.CommandContext(ctx, f.kubectl, "apply", "--server-side", "--force-conflicts", "--field-manager", "bench-kubectl",
					"--kubeconfig", f.c.Kubeconfig, "-f", file)
				if out, err := cmd.CombinedOutput(); err != nil {
					return 0, fmt.Errorf("kubectl apply: %w\n%s", err, lastLines(out))
				}
				got, err := wv.wait(ctx)
				if err != nil {
					return 0, fmt.Errorf("kubectl: %w", err)
				}
				all = append(all, got...)
				spans = append(spans, harness.Ms(maxOf(got)))
			}
			record(2, all, &lags.Kubectl)
			return harness.Median(spans), nil
		})
	}
	runs, err := harness.Rounds(rounds, ours, sides...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", w1, err)
	}
	const floorName = "client-go SSA floor (8 workers)"
	rows := []harness.Row{
		harness.Compare(w1, "makespan (source write → last copy)", "ms", runs[0], runs[1], floorName, "≤ 1.3× floor", func(r float64) bool { return r <= 1.3 }),
		harness.Compare(w1, "p99 lag per copy", "ms", p99[0], p99[1], floorName, "≤ 2× floor", func(r float64) bool { return r <= 2 }),
		harness.Compare(w1, "p50 lag per copy", "ms", p50[0], p50[1], floorName, "reported", nil),
	}
	var notes []string
	if f.kubectl != "" {
		rows = append(rows, harness.Compare(w1, "makespan (source write → last copy)", "ms", runs[0], runs[2], "kubectl apply --server-side", "< 1× kubectl", func(r float64) bool { return r < 1 }))
		notes = append(notes, fmt.Sprintf("W1: kubectl applied one 1,000-document file %d time(s) per round with its default client-side limits; ours and the floor made %d updates per round (medians of the per-update makespans).", kubectlUpdates, Updates))
	} else {
		notes = append(notes, "W1: kubectl is not on this machine: the kubectl baseline was skipped.")
	}
	if !rows[0].Pass {
		rows[0].Note = "the operator reads the source, evaluates 1,000 targets, checks each copy's metadata in its cache and applies it (8 targets at once), then writes the status with 1,000 inventory entries; the floor only applies"
	}
	if !rows[1].Pass {
		rows[1].Note = "copies are applied in target order after the evaluation of all targets, so the last ones wait for the whole pass"
	}
	return rows, lags, notes, nil
}

// updateOurs writes the source Updates times and times the operator's
// copies of each write: it returns the median makespan (ms) and every
// copy's lag.
func (f *Fixture) updateOurs(ctx context.Context) (float64, []time.Duration, error) {
	var spans []float64
	var all []time.Duration
	for range Updates {
		f.version++
		v := fmt.Sprintf("v%d", f.version)
		s, err := f.cs.CoreV1().Secrets(home).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return 0, nil, err
		}
		s.Data = data(v)
		wv := f.watcher.expect(secretName, v)
		if _, err := f.cs.CoreV1().Secrets(home).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return 0, nil, err
		}
		got, err := wv.wait(ctx)
		if err != nil {
			return 0, nil, fmt.Errorf("ours: %w", err)
		}
		all = append(all, got...)
		spans = append(spans, harness.Ms(maxOf(got)))
		time.Sleep(200 * time.Millisecond)
	}
	return harness.Median(spans), all, nil
}

// writeKubectlFile writes the 1,000 Secrets kubectl applies, one
// multi-document file.
func (f *Fixture) writeKubectlFile(file, version string) error {
	var b bytes.Buffer
	for _, ns := range f.ns {
		obj := map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": kubectlNm, "namespace": ns, "labels": map[string]any{"app.kubernetes.io/managed-by": "bench-kubectl"}},
			"data":     data(version),
		}
		y, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return os.WriteFile(file, b.Bytes(), 0o600)
}

func lastLines(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
