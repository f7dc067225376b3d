// Command run is `make bench`: it starts a local control plane, runs the
// workloads of issue 7 side by side with their baselines, and writes
// bench/REPORT.md and the fan-out chart bench/fanout.svg. It prints the
// table too, and exits 0 when targets are missed (the report says which);
// it fails only when a workload cannot run.
//
//	go run ./bench/run -only W1,W3 -rounds 3
//	go run ./bench/run -only W7 -rounds 3 -report /tmp/report.md
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/manifestsync/manifestsync/bench/fanout"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/bench/w3"
	"github.com/manifestsync/manifestsync/bench/w4"
	"github.com/manifestsync/manifestsync/bench/w6"
	"github.com/manifestsync/manifestsync/bench/w7"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

// clusterWorkload is a workload that needs the control plane, such as W5
// and W6: registered by the file that imports it.
type clusterWorkload struct {
	name string
	run  func(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, error)
	// runNotes is run for a workload that writes notes too, such as W11.
	runNotes func(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, []string, error)
	// options start its control plane, such as W9's audit log.
	options []harness.ClusterOption
}

var clusterWorkloads []clusterWorkload

func main() {
	harness.ChildMain()
	var (
		only     = flag.String("only", allWorkloads, "comma-separated workloads to run")
		rounds   = flag.Int("rounds", 3, "rounds of each workload (at least 3), alternating ours and the baselines")
		cueBin   = flag.String("cue", "bin/cue", "the cue binary (make bench builds it)")
		starBin  = flag.String("starlark", "bin/starlark", "the starlark binary (make bench builds it)")
		schemas  = flag.String("schemas", "schemas/k8s", "the builtin k8s schemas, for W4")
		report   = flag.String("report", "bench/REPORT.md", "where to write the report")
		chart    = flag.String("chart", "bench/fanout.svg", "where to write the fan-out chart")
		keepLogs = flag.String("logs", "", "directory for the operator's log (default: a temporary one)")
		base     = flag.String("base", defaultBase, "the commit W12 builds its baseline bin/engine from ('' skips W12)")
	)
	flag.Parse()
	w6.BaseRev = *base
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *only, *rounds, *cueBin, *starBin, *schemas, *report, *chart, *keepLogs); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
}

// allWorkloads are the workloads of a whole run; a run of some of them
// keeps the rows of the others from the report it rewrites.
const allWorkloads = "W1,W2,W3,W4,W5,W6,W7,W8,W9,W10,W11,W12"

// defaultBase is W12's baseline: the last commit before issue 28 linked
// the oci, http, cosign and SOPS providers into bin/engine.
const defaultBase = "2521af9"

func run(ctx context.Context, only string, rounds int, cueBin, starBin, schemas, reportFile, chartFile, logs string) error {
	want := map[string]bool{}
	for _, w := range strings.Split(only, ",") {
		want[strings.ToUpper(strings.TrimSpace(w))] = true
	}
	rep := &harness.Report{Started: time.Now()}
	dir, err := os.MkdirTemp("", "bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if logs == "" {
		logs = dir
	}
	step := func(name string) {
		fmt.Fprintf(os.Stderr, "bench: %s (%s)\n", name, time.Since(rep.Started).Round(time.Second))
	}

	if want["W3"] {
		step("W3 evaluation")
		rows, err := w3.Run(ctx, starBin, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	if want["W4"] {
		step("W4 validation")
		rows, err := w4.Run(ctx, cueBin, schemas, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	if want["W7"] {
		step("W7 diff")
		rows, notes, err := w7.Run(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}
	// Each group of cluster workloads gets a control plane of its own, so
	// that what one leaves behind (1,000 namespaces the control plane never
	// finishes deleting, an operator's last writes) is not counted by the
	// next.
	withCluster := func(what string, fn func(c *harness.Cluster) error, opts ...harness.ClusterOption) error {
		step("starting a control plane for " + what)
		c, err := harness.StartCluster(dir, opts...)
		if err != nil {
			return err
		}
		defer c.Stop() //nolint:errcheck // the run's outcome is decided
		return fn(c)
	}
	if want["W1"] || want["W2"] {
		err := withCluster("W1/W2", func(c *harness.Cluster) error {
			return runFanout(ctx, c, rep, want, rounds, dir, logs, chartFile, reportFile, step)
		})
		if err != nil {
			return err
		}
	}
	for _, w := range clusterWorkloads {
		if !want[w.name] {
			continue
		}
		err := withCluster(w.name, func(c *harness.Cluster) error {
			step(w.name)
			if w.runNotes != nil {
				rows, notes, err := w.runNotes(ctx, c, rounds)
				rep.Rows = append(rep.Rows, rows...)
				rep.Notes = append(rep.Notes, notes...)
				return err
			}
			rows, err := w.run(ctx, c, rounds)
			rep.Rows = append(rep.Rows, rows...)
			return err
		}, w.options...)
		if err != nil {
			return err
		}
	}
	slices.SortStableFunc(rep.Rows, func(a, b harness.Row) int {
		return harness.WorkloadNumber(a.Workload) - harness.WorkloadNumber(b.Workload)
	})
	rep.Duration = time.Since(rep.Started)
	var b bytes.Buffer
	old, err := os.ReadFile(reportFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(want) < len(strings.Split(allWorkloads, ",")) {
		rep.Keep(old, func(workload string) bool { return want[strings.Fields(workload + " ")[0]] })
	}
	if err := rep.Write(&b); err != nil {
		return err
	}
	b.Write(soakSection(old))
	if err := os.WriteFile(reportFile, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Print(b.String())
	step("wrote " + reportFile)
	return nil
}

func runFanout(ctx context.Context, c *harness.Cluster, rep *harness.Report, want map[string]bool, rounds int, dir, logs, chartFile, reportFile string, step func(string)) error {
	step("building engine")
	engineBin, err := enginebuild.Image(ctx, c.Root, filepath.Join(dir, "image")) // the image's engine and its worker
	if err != nil {
		return fmt.Errorf("building engine: %w", err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		kubectl = ""
	}
	step("W1/W2 setup: 1,000 namespaces, the operator, the first sync")
	f, err := fanout.Setup(ctx, c, engineBin, kubectl, logs)
	if err != nil {
		return err
	}
	defer f.Stop()
	rep.Notes = append(rep.Notes, fmt.Sprintf("W1/W2: `engine operator` ran as a process of its own with --target-concurrency %d (the floor's concurrency; the default too) and, as by default, no client-side rate limit (nor has the floor); the first sync of the 1,000 copies took %s.",
		fanout.Workers, f.InitSync.Round(time.Millisecond)))
	if want["W1"] {
		step("W1 fan-out")
		rows, lags, notes, err := f.W1(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
		series := []harness.Series{{Name: "ManifestSync", Values: lags.Ours}, {Name: "client-go floor", Values: lags.Floor}}
		if len(lags.Kubectl) > 0 {
			series = append(series, harness.Series{Name: "kubectl --server-side", Values: lags.Kubectl})
		}
		var svg bytes.Buffer
		if err := harness.WriteCDF(&svg, "W1: per-copy lag after a source write, 1,000 namespaces", "lag (ms)", series); err != nil {
			return err
		}
		if err := os.WriteFile(chartFile, svg.Bytes(), 0o644); err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(reportFile), chartFile)
		if err != nil {
			rel = chartFile
		}
		rep.Charts = append(rep.Charts, harness.Chart{File: rel,
			Caption: "W1: cumulative distribution of the per-copy lag (source write → the copy's watch event, seen by an independent watcher), every update of every round."})
	}
	if want["W2"] {
		step("W2 steady state")
		rows, notes, err := f.W2(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}
	if want["W1"] {
		step("W1 fan-out with wait")
		rows, err := f.W1Wait(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	if want["W2"] {
		step("W2 steady state with wait")
		rows, notes, err := f.W2Wait(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("W1/W2: the operator's peak RSS over the run: %.0f MiB.", f.OperatorRSS()))
	if want["W2"] {
		step("W2 operator restart")
		rows, notes, err := f.Restart(ctx, rounds)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Notes = append(rep.Notes, notes...)
	}
	return nil
}

// soakHeading starts the section of the report that `make soak` fills
// (the fault suite's table, pasted from bin/soak-report.md), which a
// benchmark run keeps as it is.
const soakHeading = "\n## Fault soak"

// soakSection is the fault soak section of a report, from its heading to
// the end, or nothing.
func soakSection(report []byte) []byte {
	if i := bytes.Index(report, []byte(soakHeading)); i >= 0 {
		return report[i:]
	}
	return nil
}
