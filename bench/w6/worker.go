package w6

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

// workerIdle is how long a worker runs, waiting for work, before its
// memory is read: its start (the runtime, the package inits, the wait on
// stdin) is over well before.
const workerIdle = 1500 * time.Millisecond

// workerMemory is one idle evaluation worker's resident set: the peak
// (VmHWM) and its anonymous and file-backed parts, in MiB.
type workerMemory struct{ rss, anon, file float64 }

// idleWorker starts the worker command (its binary evicted from the page
// cache first, as a pod's start finds it), lets it wait for work for
// workerIdle with its stdin open, reads its memory and closes its stdin,
// which ends it.
func idleWorker(ctx context.Context, args ...string) (workerMemory, error) {
	if err := harness.Evict(args[0]); err != nil {
		return workerMemory{}, err
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return workerMemory{}, err
	}
	if err := cmd.Start(); err != nil {
		return workerMemory{}, err
	}
	defer cmd.Wait() //nolint:errcheck // ended by its closed stdin
	defer stdin.Close()
	time.Sleep(workerIdle)
	var m workerMemory
	for _, f := range []struct {
		name string
		to   *float64
	}{{"VmHWM", &m.rss}, {"RssAnon", &m.anon}, {"RssFile", &m.file}} {
		n, err := harness.ProcStatus(cmd.Process.Pid, f.name)
		if err != nil {
			return workerMemory{}, fmt.Errorf("%s: %w", filepath.Base(args[0]), err)
		}
		*f.to = mib(n)
	}
	return m, nil
}

// workerRows compare an idle evaluation worker of engine-worker (the
// image's, worker) with one of `engine eval-worker` of a full engine
// (full, how bin/engine starts its workers), alternating, rounds times.
func workerRows(ctx context.Context, worker, full, baseline string, rounds int) ([]harness.Row, []string, error) {
	var mem [2][]workerMemory
	side := func(i int, args ...string) func() (float64, error) {
		return func() (float64, error) {
			m, err := idleWorker(ctx, args...)
			mem[i] = append(mem[i], m)
			return m.rss, err
		}
	}
	runs, err := harness.Rounds(rounds, side(0, worker), side(1, full, "eval-worker"))
	if err != nil {
		return nil, nil, err
	}
	part := func(i int, f func(workerMemory) float64) []float64 {
		var out []float64
		for _, m := range mem[i] {
			out = append(out, f(m))
		}
		return out
	}
	anon := func(m workerMemory) float64 { return m.anon }
	file := func(m workerMemory) float64 { return m.file }
	baseline = "`engine eval-worker` of " + baseline
	rows := []harness.Row{
		harness.Compare(costWorkload, "engine-worker size on disk", "MiB", []float64{fileMiB(worker)}, []float64{fileMiB(full)}, baseline, "reported", nil),
		harness.Compare(costWorkload, "an idle evaluation worker, the image's engine-worker: peak RSS", "MiB", runs[0], runs[1], baseline, "≤ 0.8×", func(q float64) bool { return q <= 0.8 }),
		harness.Compare(costWorkload, "an idle evaluation worker: anonymous memory (RssAnon)", "MiB", part(0, anon), part(1, anon), baseline, "reported", nil),
		harness.Compare(costWorkload, "an idle evaluation worker: file-backed pages (RssFile)", "MiB", part(0, file), part(1, file), baseline, "reported", nil),
	}
	note := fmt.Sprintf("W12: an evaluation worker is a process of its own for each evaluation that runs at once (the operator keeps the last one used for --eval-idle-timeout). Measured %s after its start, waiting for work on its stdin, its binary evicted from the page cache before each start; engine-worker links the evaluators and the worker protocol and nothing of the operator, the CLI or the Kubernetes clients but what Helm's template engine imports, so its start touches fewer pages of a smaller file.", workerIdle)
	return rows, []string{note}, nil
}
