package fanout

import (
	"context"
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
)

const (
	w1Wait  = "W1 fan-out, wait"
	w2Wait  = "W2 steady state, wait"
	restart = "W2 operator restart"
)

// setWait sets the ManifestSync's spec.wait and waits until it is Ready
// at its new generation.
func (f *Fixture) setWait(ctx context.Context, on bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"wait":%t}}`, on)
	if _, err := f.dyn.Resource(syncGVR).Namespace(home).Patch(ctx, syncName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	return f.waitReady(ctx, time.Minute)
}

// waitReady waits, at most within, until the ManifestSync is Ready at its
// current generation.
func (f *Fixture) waitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ms, err := f.sync(ctx)
		if err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady)
		if c != nil && c.ObservedGeneration == ms.Generation && c.Status == metav1.ConditionTrue {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ManifestSync %s/%s not Ready after %s: %+v", home, syncName, within, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *Fixture) sync(ctx context.Context) (*v1alpha1.ManifestSync, error) {
	u, err := f.dyn.Resource(syncGVR).Namespace(home).Get(ctx, syncName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ms := &v1alpha1.ManifestSync{}
	return ms, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ms)
}

// W1Wait times W1's fan-out with spec.wait set against the same fan-out
// without it, alternately on the same fixture (twice the rounds of W1,
// each side going first in every other one): the health checks must cost
// the fan-out next to nothing.
func (f *Fixture) W1Wait(ctx context.Context, rounds int) ([]harness.Row, error) {
	side := func(wait bool) func() (float64, error) {
		return func() (float64, error) {
			if err := f.setWait(ctx, wait); err != nil {
				return 0, err
			}
			span, _, err := f.updateOurs(ctx)
			return span, err
		}
	}
	// The sides take turns going first, so that neither always follows
	// the other's spec change.
	var waits, plains []float64
	for i := range max(rounds, 3) * 2 {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, wait := range order {
			v, err := side(wait)()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w1Wait, err)
			}
			if wait {
				waits = append(waits, v)
			} else {
				plains = append(plains, v)
			}
		}
	}
	return []harness.Row{harness.Compare(w1Wait, "makespan (source write → last copy)", "ms", waits, plains, "W1 without wait (same run)", "≤ 1.1× without wait",
		func(r float64) bool { return r <= 1.1 })}, nil
}

// W2Wait is W2's steady state with spec.wait set: resyncs of healthy,
// unchanged copies write nothing and cost the API server next to nothing.
func (f *Fixture) W2Wait(ctx context.Context, rounds int) ([]harness.Row, []string, error) {
	if err := f.setWait(ctx, true); err != nil {
		return nil, nil, err
	}
	var reqs, writes, bumps []float64
	var last cost
	for range max(rounds, 3) {
		c, err := f.measure(ctx, f.resyncOurs)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", w2Wait, err)
		}
		reqs, writes, bumps, last = append(reqs, c.requests), append(writes, c.writes), append(bumps, c.bumps), c
	}
	rows := []harness.Row{
		harness.Absolute(w2Wait, "requests per object per resync", "", reqs, "≤ 0.01", func(v float64) bool { return v <= 0.01 }),
		harness.Absolute(w2Wait, fmt.Sprintf("writes to the copies (%d resyncs)", Resyncs), "", writes, "= 0", func(v float64) bool { return v == 0 }),
		harness.Absolute(w2Wait, fmt.Sprintf("resourceVersion bumps of the copies (%d resyncs)", Resyncs), "", bumps, "= 0", func(v float64) bool { return v == 0 }),
	}
	return rows, []string{"W2 with wait, last round: " + last.detail + "."}, nil
}

// Restart stops the operator and starts a new one over the 1,000 synced
// copies, rounds times: nothing changed, so it must write nothing. It
// reports the writes the API server counted from the new operator's start
// until its first reconcile of the ManifestSync had ended (and a second
// more), and how long that reconcile took to come.
func (f *Fixture) Restart(ctx context.Context, rounds int) ([]harness.Row, []string, error) {
	var copies, all, ready []float64
	var detail string
	for range max(rounds, 3) {
		if err := f.op.Stop(); err != nil {
			return nil, nil, err
		}
		time.Sleep(time.Second)
		before, err := f.copyVersions(ctx)
		if err != nil {
			return nil, nil, err
		}
		r0, err := harness.ReadAPIRequests(ctx, f.c.Config)
		if err != nil {
			return nil, nil, err
		}
		start := time.Now()
		if f.op, err = harness.StartOperator(ctx, f.c, f.engine, f.dir+"/operator-restart.log", f.opFlags...); err != nil {
			return nil, nil, err
		}
		for {
			n, err := f.op.Reconciles(ctx)
			if err != nil {
				return nil, nil, err
			}
			if n > 0 {
				break
			}
			if time.Since(start) > 2*time.Minute {
				return nil, nil, fmt.Errorf("%s: no reconcile within 2 minutes of the start", restart)
			}
			time.Sleep(20 * time.Millisecond)
		}
		ready = append(ready, harness.Ms(time.Since(start)))
		if err := f.waitReady(ctx, time.Minute); err != nil {
			return nil, nil, err
		}
		time.Sleep(time.Second)
		r1, err := harness.ReadAPIRequests(ctx, f.c.Config)
		if err != nil {
			return nil, nil, err
		}
		after, err := f.copyVersions(ctx)
		if err != nil {
			return nil, nil, err
		}
		d := r1.Sub(r0)
		var bumped float64
		for k, v := range before {
			if after[k] != v {
				bumped++
			}
		}
		copies = append(copies, max(bumped, d.Count(func(q harness.APIRequest) bool { return q.Write() && q.Resource == "secrets" })))
		all = append(all, d.Count(func(q harness.APIRequest) bool { return q.Write() && !q.Housekeeping() }))
		detail = describe(d, func(q harness.APIRequest) bool { return q.Write() && !q.Housekeeping() })
	}
	rows := []harness.Row{
		harness.Absolute(restart, "writes to the 1,000 copies after a restart", "", copies, "= 0", func(v float64) bool { return v == 0 }),
		harness.Absolute(restart, "writes of any kind after a restart (status included)", "", all, "reported", func(float64) bool { return true }),
		harness.Absolute(restart, "start → first reconcile ended (1,000 targets)", "ms", ready, "reported", func(float64) bool { return true }),
	}
	rows[1].Reported, rows[2].Reported = true, true
	return rows, []string{"W2 restart, writes in the last round: " + detail + "."}, nil
}
