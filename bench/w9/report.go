package w9

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

// rows are the report's rows, with the targets: the ratios
// against the fewest replicas (1), the rest absolute.
func (b *bench) rows(doubles []Double, stats WriteStats) []harness.Row {
	base, top := b.cfg.Replicas[0], b.cfg.Replicas[len(b.cfg.Replicas)-1]
	one := fmt.Sprintf("%d replica", base)
	if base != 1 {
		one += "s"
	}
	var rows []harness.Row
	for _, n := range b.cfg.Replicas {
		if n < 2 {
			continue
		}
		r := harness.Compare(workload, fmt.Sprintf("ManifestSyncs owned per replica, most against fewest (%d replicas)", n), "",
			b.most[n], b.fewest[n], "fewest owned", "≤ 1.15×", func(q float64) bool { return q <= 1.15 })
		if !r.Pass {
			r.Note = fmt.Sprintf("most %v, fewest %v over the rounds", b.most[n], b.fewest[n])
		}
		rows = append(rows, r)
	}
	if len(b.moved) > 0 {
		r := harness.Compare(workload, fmt.Sprintf("ManifestSyncs moved when replica %d joins %d", top+1, top), "",
			b.moved, b.ideal, fmt.Sprintf("ideal 1/%d", top+1), "≤ 1.3×", func(q float64) bool { return q <= 1.3 })
		if !r.Pass {
			r.Note = fmt.Sprintf("moved %v of %d over the rounds", b.moved, b.cfg.Syncs)
		}
		rows = append(rows, r)
	}
	if len(b.late) > 0 {
		worst := slices.Max(b.late)
		r := harness.Row{Workload: workload, Unit: "s", Ours: worst, Target: "≤ 15 s", Pass: worst <= 15,
			Metric: fmt.Sprintf("kill -9 of 1 of %d: its Lease's expiry to the last of its ManifestSyncs synced by another (worst of %d rounds)", top, len(b.late))}
		if !r.Pass {
			r.Note = fmt.Sprintf("%v s over the rounds, for %v ManifestSyncs it owned; each of the others syncs its share of them, their params having changed at the kill (the others' own left as they were)", round1(b.late), b.killedOwned)
		}
		early := 0.0
		for _, e := range b.early {
			early += e
		}
		rows = append(rows, r, harness.Row{Workload: workload, Ours: early, Target: "= 0", Pass: early == 0,
			Metric: "ManifestSyncs taken from the killed replica before its Lease expired (label watch, all rounds)",
			Note:   "the label watch saw the owner change before the killed replica's Lease expired"})
	}
	dbl := harness.Row{Workload: workload, Ours: float64(len(doubles)), Target: "= 0", Pass: len(doubles) == 0,
		Metric: fmt.Sprintf("ConfigMaps written by two replicas within 1 s (audit log, whole run: %d writes, %d ConfigMaps over all runs)", stats.Writes, stats.Objects)}
	if !dbl.Pass {
		var ex []string
		for _, d := range doubles[:min(len(doubles), 3)] {
			ex = append(ex, fmt.Sprintf("%s by %s then %s %s apart", d.Object, strings.TrimPrefix(d.First, userPrefix), strings.TrimPrefix(d.Second, userPrefix), d.Apart.Round(time.Millisecond)))
		}
		dbl.Note = "e.g. " + strings.Join(ex, "; ")
	}
	rows = append(rows, dbl)
	for _, n := range b.cfg.Replicas[1:] {
		var pass func(float64) bool
		target := "reported"
		if n == top {
			target, pass = "≤ 0.4×", func(q float64) bool { return q <= 0.4 }
		}
		r := harness.Compare(workload, fmt.Sprintf("time to all %d Ready (%d replicas)", b.cfg.Syncs, n), "s", b.ready[n], b.ready[base], one, target, pass)
		if !r.Pass {
			r.Note = fmt.Sprintf("%v s against %v s over the rounds; the %d cores (GOMAXPROCS %d) are shared by the API server, etcd and every replica with its evaluation workers, and were busy %v%% of the time until all were Ready with %d replicas, %v%% with 1: more replicas add no CPU to share",
				round1(b.ready[n]), round1(b.ready[base]), runtime.NumCPU(), runtime.GOMAXPROCS(0), round0(b.busy[n]), n, round0(b.busy[base]))
		}
		rows = append(rows, r)
	}
	rss := harness.Compare(workload, fmt.Sprintf("peak RSS per replica, with its eval workers (the largest of %d)", top), "MiB",
		b.rss[top], b.rss[base], one, "≤ 0.4×", func(q float64) bool { return q <= 0.4 })
	rss.Note = fmt.Sprintf("evaluation workers run at once by that replica: %v over the rounds, against %v with 1 replica (each a process of engine-worker, as in the image; another starts for an evaluation that waited 100 ms)",
		b.workers[top], b.workers[base])
	if !rss.Pass {
		rss.Note += fmt.Sprintf("; of the largest replica's peak, %.1f MiB (median) are file-backed pages of its process, mostly its executable's own, alike in every process whatever its share; its anonymous memory (RssAnon, with its workers') is a row below",
			harness.Median(b.file[top]))
	}
	own := harness.Compare(workload, fmt.Sprintf("peak RSS per replica, the operator process alone (VmHWM, the largest of %d)", top), "MiB",
		b.own[top], b.own[base], one, "reported", nil)
	anon := harness.Compare(workload, fmt.Sprintf("peak anonymous memory (RssAnon) per replica, with its eval workers (the largest of %d)", top), "MiB",
		b.anon[top], b.anon[base], one, "reported", nil)
	return append(rows, rss, own, anon)
}

// notes say how the run went.
func (b *bench) notes(doubles []Double, stats WriteStats) []string {
	top := b.cfg.Replicas[len(b.cfg.Replicas)-1]
	closest := "no ConfigMap was written by more than one replica"
	if stats.Moved > 0 {
		closest = fmt.Sprintf("in one run, %d ConfigMaps were written by more than one replica (moved with their ManifestSync), the closest two such writes %s apart", stats.Moved, stats.Closest.Round(time.Millisecond))
	}
	return []string{fmt.Sprintf("W9: %d ManifestSyncs of %d ConfigMaps each (an inline Starlark transform) in %d namespaces, over %v replicas of `engine operator --shards auto` (each a process of the image's lean engine, a user of the API server of its own, its evaluation workers processes of engine-worker; default Lease timings: 15 s, renewed every 2 s), %d rounds, every replica count from nothing (the replicas hold their Leases before the ManifestSyncs are created; time to all Ready from the first creation). With %d: replica %d joins and then stops (SIGTERM), and one replica not running the sharder is killed (SIGKILL) as the params of its ManifestSyncs change. Memory is sampled every 50 ms per replica, with its evaluation workers. The API server's audit log held %d writes of ConfigMaps by %d replica users (%d ConfigMaps, each counted once per run of replicas); %s.",
		b.cfg.Syncs, objects, spread, b.cfg.Replicas, b.cfg.Rounds, top, top+1, stats.Writes, stats.Users, stats.Objects, closest)}
}

func round0(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = float64(int(v + 0.5))
	}
	return out
}

func round1(vs []float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = float64(int(v*10+0.5)) / 10
	}
	return out
}
