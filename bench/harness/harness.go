// Package harness is the frame of `make bench`: it runs each workload side
// by side with its baselines in one run, alternating A B A B so that the
// machine's drift hits both alike, and collects rows for bench/REPORT.md:
// the medians, our ratio to each baseline with its min and max over the
// rounds, the target and whether this run met it.
package harness

import (
	"fmt"
	"slices"
	"time"
)

// Row is one measured quantity of a workload, ours against a baseline.
type Row struct {
	Workload string // "W1 fan-out"
	Metric   string // "makespan", "p99 lag", "requests per object per resync"
	Unit     string // "ms", "objects/s", "MiB", "" for counts
	Ours     float64
	Baseline string  // what Base measures, e.g. "client-go SSA floor"; "" when the target is absolute
	Base     float64 // the baseline's median
	// RatioMin and RatioMax are Ours/Base over the rounds.
	RatioMin, RatioMax float64
	Target             string // "≤ 1.3× floor", "= 0"
	Pass               bool
	// Reported marks a row without a target: reported, not judged.
	Reported bool
	Note     string // what limits it, when it misses
}

// Ratio is Ours/Base, or 0 when there is no baseline.
func (r Row) Ratio() float64 {
	if r.Base == 0 {
		return 0
	}
	return r.Ours / r.Base
}

// Rounds runs ours and each baseline in turn, rounds times (at least 3),
// and returns the measurements of each: runs[0] are ours.
func Rounds(rounds int, ours func() (float64, error), baselines ...func() (float64, error)) ([][]float64, error) {
	rounds = max(rounds, 3)
	all := append([]func() (float64, error){ours}, baselines...)
	runs := make([][]float64, len(all))
	for range rounds {
		for i, f := range all {
			v, err := f()
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], v)
		}
	}
	return runs, nil
}

// Compare makes a row of ours against one baseline from their runs, pass
// deciding from the medians' ratio whether the target is met; a nil pass
// makes a row that is only reported.
func Compare(workload, metric, unit string, ours, base []float64, baseline, target string, pass func(ratio float64) bool) Row {
	r := Row{Workload: workload, Metric: metric, Unit: unit, Ours: Median(ours), Baseline: baseline, Base: Median(base), Target: target}
	r.RatioMin, r.RatioMax = ratioRange(ours, base)
	if pass == nil {
		r.Pass, r.Reported = true, true
		return r
	}
	r.Pass = pass(r.Ratio())
	return r
}

// Absolute makes a row of a quantity with an absolute target.
func Absolute(workload, metric, unit string, ours []float64, target string, pass func(v float64) bool) Row {
	r := Row{Workload: workload, Metric: metric, Unit: unit, Ours: Median(ours), Target: target}
	r.Pass = pass(r.Ours)
	return r
}

func ratioRange(ours, base []float64) (lo, hi float64) {
	lo, hi = 1e300, 0
	for i := range min(len(ours), len(base)) {
		if base[i] == 0 {
			continue
		}
		q := ours[i] / base[i]
		lo, hi = min(lo, q), max(hi, q)
	}
	if hi == 0 {
		return 0, 0
	}
	return lo, hi
}

// Median is the median of vs (the upper one of an even count).
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Percentile is the p-th percentile (0–100) of durations, nearest rank.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Format renders a value with its unit.
func Format(v float64, unit string) string {
	switch {
	case v == 0:
		return "0 " + unit
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 1:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	return fmt.Sprintf("%.4f %s", v, unit)
}
