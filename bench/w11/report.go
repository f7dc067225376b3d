package w11

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

// report makes W11's rows and notes from its rounds: each row is the
// median of the rounds' figures.
func report(rounds []round) ([]harness.Row, []string) {
	each := func(f func(round) float64) []float64 {
		vs := make([]float64, len(rounds))
		for i, r := range rounds {
			vs[i] = f(r)
		}
		return vs
	}
	ms := func(d time.Duration) float64 { return harness.Ms(d) }
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	reported := func(r harness.Row) harness.Row { r.Pass, r.Reported = true, true; return r }
	always := func(float64) bool { return true }

	p95 := harness.Absolute(workload, fmt.Sprintf("overview (GET /, %d ManifestSyncs) p95, server side (Server-Timing), %d sequential requests", syncs, requests), "ms",
		each(func(r round) float64 { return ms(r.p95) }), "≤ 200 ms", func(v float64) bool { return v <= ms(p95Target) })
	p50 := reported(harness.Absolute(workload, "overview p50, server side", "ms", each(func(r round) float64 { return ms(r.p50) }), "reported", always))
	client := reported(harness.Absolute(workload, "overview p95 as the client waited (loopback, whole page read)", "ms", each(func(r round) float64 { return ms(r.clientP95) }), "reported", always))
	size := reported(harness.Absolute(workload, "overview page size", "KiB", each(func(r round) float64 { return float64(r.pageBytes) / 1024 }), "reported", always))
	base := reported(harness.Absolute(workload, fmt.Sprintf("engine ui resident set (VmRSS of its own process, not its evaluation workers'), %d ManifestSyncs listed, before the streams", syncs), "MiB",
		each(func(r round) float64 { return mib(r.rssBase) }), "reported", always))
	rss := harness.Absolute(workload, fmt.Sprintf("VmRSS added by %d open event streams (GET /stream), after one change reached them all", nStreams), "MiB",
		each(func(r round) float64 { return mib(r.rssAdded) }), "≤ 10 MiB", func(v float64) bool { return v <= mib(rssTarget) })
	// A single round's extra watch is a failure, not a median's.
	watches := each(func(r round) float64 { return r.watchesAdded })
	extra := harness.Absolute(workload, fmt.Sprintf("extra watches on the API server with %d streams open (apiserver_longrunning_requests, verb WATCH)", nStreams), "",
		watches, "= 0", func(float64) bool { return slices.Max(watches) == 0 && slices.Min(watches) == 0 })
	seen := each(func(r round) float64 { return float64(r.streamsSeen) })
	reached := harness.Absolute(workload, fmt.Sprintf("streams that received the change (of %d)", nStreams), "", seen,
		fmt.Sprintf("= %d", nStreams), func(float64) bool { return slices.Min(seen) == nStreams })
	lag := reported(harness.Absolute(workload, fmt.Sprintf("status write → its change event on all %d streams", nStreams), "ms",
		each(func(r round) float64 { return ms(r.changeToAll) }), "reported", always))
	apiReqs := reported(harness.Absolute(workload, fmt.Sprintf("API requests by engine ui while %d streams were open and one change reached them", nStreams), "",
		each(func(r round) float64 { return r.apiRequestsByUI }), "reported", always))

	if !p95.Pass {
		p95.Note = fmt.Sprintf("median of the rounds' p95 %.1f ms (rounds: %s); p50 %.1f ms; the page is %.0f KiB", p95.Ours, list(each(func(r round) float64 { return ms(r.p95) }), "ms"), p50.Ours, size.Ours)
	}
	if !rss.Pass {
		rss.Note = fmt.Sprintf("rounds: %s, over a base of %.1f MiB", list(each(func(r round) float64 { return mib(r.rssAdded) }), "MiB"), base.Ours)
	}
	if !extra.Pass {
		extra.Note = fmt.Sprintf("rounds: %v more watches while the streams were open (each stream watching for itself?)", watches)
	}
	if !reached.Pass {
		reached.Note = fmt.Sprintf("rounds: %v of %d streams received the change within %s", seen, nStreams, seenTimeout)
	}
	rows := []harness.Row{p95, p50, client, size, base, rss, extra, reached, lag, apiReqs}

	last := rounds[len(rounds)-1]
	registered := "not exported by this API server"
	if last.registeredAdded >= 0 {
		registered = list(each(func(r round) float64 { return r.registeredAdded }), "")
	}
	notes := []string{fmt.Sprintf("W11: `engine ui --addr 127.0.0.1:0` ran as a process of its own with an administrator's kubeconfig, a fresh one each round, "+
		"against %d ManifestSyncs in %d namespaces whose statuses (Ready/Healthy/Reconciling/Stalled conditions, a target row, an inventory of %d objects, %d history entries; "+
		"2%% suspended, 5%% failing, 5%% progressing, 5%% degraded, 4%% drifted) the benchmark wrote through the status subresource: no operator ran. "+
		"Per round: %d requests of GET / after %d of warm-up, one at a time; then %d GET /stream held open on connections of their own, one status write, "+
		"VmRSS read %s after the last page, before the streams opened, and %s after the change reached them all. Server-side p95 by round: %s, the machine's 1-minute load average (2 cores, shared) as each round's pages were read: %s. "+
		"Watches the API server served before the streams (the UI's own and its internal ones): %s; registered watchers added by the streams: %s. "+
		"API requests of engine ui in the streams phase, last round: %s.",
		syncs, namespaces, objectsPer, historyLen, requests, warmup, nStreams, settle, settle,
		list(each(func(r round) float64 { return ms(r.p95) }), "ms"), loads(rounds),
		list(each(func(r round) float64 { return r.watchesBefore }), ""), registered, last.apiRequestsNamed)}
	return rows, notes
}

// list renders values with their unit, as "12.3 ms, 14.0 ms".
func list(vs []float64, unit string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strings.TrimSpace(fmt.Sprintf("%.1f %s", v, unit))
	}
	return strings.Join(parts, ", ")
}

// sortedRequests are d's classes in a stable order.
func sortedRequests(d harness.APIRequests) []harness.APIRequest {
	keys := make([]harness.APIRequest, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b harness.APIRequest) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Subresource, b.Subresource), cmp.Compare(a.Verb, b.Verb))
	})
	return keys
}

// resourceName is a request class's resource as kubectl names it
// ("manifestsyncs/status").
func resourceName(k harness.APIRequest) string {
	if k.Subresource != "" {
		return k.Resource + "/" + k.Subresource
	}
	return k.Resource
}

// loads are the rounds' load averages, as "3.1, 4.0, 2.2".
func loads(rounds []round) string {
	parts := make([]string, len(rounds))
	for i, r := range rounds {
		parts[i] = r.load
	}
	return strings.Join(parts, ", ")
}
