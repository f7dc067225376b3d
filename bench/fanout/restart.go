package fanout

import (
	"context"
	"fmt"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

const restartName = "W2 restart"

// Restart stops the operator and starts another over the 1,000 synced,
// unchanged copies, once per round, and measures what the restart costs:
// the writes the API server counts (a restarted operator that re-applied
// everything would write 1,000 times) and the time from the process's
// start to the end of its first sync of the ManifestSync.
func (f *Fixture) Restart(ctx context.Context, rounds int) ([]harness.Row, []string, error) {
	var writes, ready []float64
	var detail string
	for i := range max(rounds, 3) {
		time.Sleep(time.Second) // let the last writes' echo settle
		r0, err := harness.ReadAPIRequests(ctx, f.c.Config)
		if err != nil {
			return nil, nil, err
		}
		if err := f.op.Stop(); err != nil {
			return nil, nil, fmt.Errorf("%s: stopping the operator: %w", restartName, err)
		}
		start := time.Now()
		f.op, err = harness.StartOperator(ctx, f.c, f.engine, fmt.Sprintf("%s/operator-restart-%d.log", f.dir, i), "--target-concurrency", fmt.Sprint(Workers))
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", restartName, err)
		}
		if err := f.firstSync(ctx); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", restartName, err)
		}
		ready = append(ready, harness.Ms(time.Since(start)))
		time.Sleep(2 * time.Second) // the reconciles its watches' first events bring
		r1, err := harness.ReadAPIRequests(ctx, f.c.Config)
		if err != nil {
			return nil, nil, err
		}
		d := r1.Sub(r0)
		counted := func(q harness.APIRequest) bool { return !q.Housekeeping() && q.Write() }
		writes = append(writes, d.Count(counted))
		detail = ""
		for q, n := range d {
			if counted(q) {
				detail += fmt.Sprintf("%s %s/%s %.0f; ", q.Verb, q.Resource, q.Subresource, n)
			}
		}
	}
	w := harness.Absolute(restartName, fmt.Sprintf("writes after an operator restart over %d synced copies", Targets), "", writes, "= 0",
		func(v float64) bool { return v == 0 })
	if !w.Pass {
		w.Note = "writes in the last round: " + detail
	}
	r := harness.Absolute(restartName, "time to Ready after the restart (process start to its first sync's end)", "ms", ready, "reported",
		func(float64) bool { return true })
	r.Reported = true
	notes := []string{fmt.Sprintf("W2 restart: the operator is stopped (SIGTERM) and started again over the %d unchanged copies; writes are apiserver_request_total deltas "+
		"from before the stop to 2 s after the new operator's first sync (its watches' first events reconcile again), less the API server's housekeeping.", Targets)}
	return []harness.Row{w, r}, notes, nil
}

// firstSync waits until the operator has finished a reconcile (there is one
// ManifestSync).
func (f *Fixture) firstSync(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := f.op.Reconciles(ctx)
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no reconcile within 2m of the restart (reconciles %v, %v)", n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
