// Package w11 is workload W11 of `make bench`: the web UI server of issue
// 27. A local control plane holds 1,000 ManifestSyncs in 20 namespaces,
// each with the status an operator writes (conditions, a target, an
// inventory of five objects, a history of five entries), written by the
// benchmark through the status subresource: no operator runs, so that
// the UI server is the only reader. `engine ui` runs as a process of its
// own with an administrator's kubeconfig, as a user runs it. Measured, in
// each round on a fresh `engine ui`:
//
//   - the overview page (GET /, all 1,000 listed): the server's own
//     handling time, from its Server-Timing header (app;dur=MS), over
//     200 sequential requests after 20 of warm-up; p95 ≤ 200 ms;
//   - 50 event streams (GET /stream) held open, then one status change
//     that must reach all of them: the growth of the process's resident
//     set (VmRSS) from before they opened to after the change reached
//     them, ≤ 10 MiB, and the growth of the API server's count of the
//     watches it serves (its own metrics), = 0: the server watches once
//     for every viewer.
//
// It is a benchmark: nothing in the product may import it.
package w11

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

const (
	workload = "W11 ui"

	warmup   = 20
	requests = 200
	nStreams = 50

	p95Target = 200 * time.Millisecond
	rssTarget = 10 << 20

	// settle is how long the process rests before and after the
	// streams, so that the resident set read is not caught mid-request.
	settle = time.Second
	// seenTimeout bounds the wait for the change to reach every stream.
	seenTimeout = 10 * time.Second
)

// round is what one round measured.
type round struct {
	p50, p95         time.Duration // server side
	clientP95        time.Duration // as the client waited, loopback
	pageBytes        int
	rssBase          int64 // VmRSS before the streams
	rssAdded         int64 // VmRSS growth with the streams open
	watchesAdded     float64
	registeredAdded  float64 // -1: not exported
	watchesBefore    float64
	streamsSeen      int
	changeToAll      time.Duration // the status write → the last stream's event
	apiRequestsByUI  float64       // during the streams phase, the benchmark's own left out
	apiRequestsNamed string
	load             string // the machine's 1-minute load average as the pages were read
}

// Run measures W11 on c, rounds times (at least 3).
func Run(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, []string, error) {
	dir, err := os.MkdirTemp("", "bench-w11-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	engineBin, err := enginebuild.Image(ctx, c.Root, filepath.Join(dir, "image")) // the image's engine and its worker
	if err != nil {
		return nil, nil, fmt.Errorf("w11: building engine: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	if err := populate(ctx, cl, syncs); err != nil {
		return nil, nil, fmt.Errorf("w11: %w", err)
	}
	var got []round
	for r := range max(rounds, 3) {
		rd, err := measure(ctx, c, cl, engineBin, filepath.Join(dir, fmt.Sprintf("ui-%d.log", r)), r)
		if err != nil {
			return nil, nil, fmt.Errorf("w11: round %d: %w", r+1, err)
		}
		got = append(got, rd)
	}
	rows, notes := report(got)
	return rows, notes, nil
}

// measure runs one round on a fresh engine ui.
func measure(ctx context.Context, c *harness.Cluster, cl client.Client, engineBin, logFile string, r int) (round, error) {
	var rd round
	ui, err := startUI(ctx, engineBin, c.Kubeconfig, logFile)
	if err != nil {
		return rd, err
	}
	defer ui.stop() //nolint:errcheck // the round's outcome is decided
	hc := &http.Client{Timeout: 30 * time.Second}
	if err := waitListed(ctx, hc, ui.url, syncs); err != nil {
		return rd, fmt.Errorf("%w (log: %s)", err, logFile)
	}

	// The overview, sequentially: the server's time per page.
	rd.load = loadAverage()
	var server, clientSide []time.Duration
	for k := range warmup + requests {
		p, err := get(ctx, hc, ui.url+"/")
		if err != nil {
			return rd, err
		}
		if p.server < 0 {
			return rd, errors.New("the overview has no Server-Timing header (app;dur=MS): the server's own time cannot be told from the client's")
		}
		if n := rowsOf(p.body); n != syncs {
			return rd, fmt.Errorf("the overview listed %d ManifestSyncs, want %d", n, syncs)
		}
		if k >= warmup {
			server, clientSide = append(server, p.server), append(clientSide, p.client)
			rd.pageBytes = len(p.body)
		}
	}
	rd.p50, rd.p95 = harness.Percentile(server, 50), harness.Percentile(server, 95)
	rd.clientP95 = harness.Percentile(clientSide, 95)

	// 50 event streams, and one change that reaches them all.
	time.Sleep(settle)
	if rd.rssBase, err = ui.rss(); err != nil {
		return rd, err
	}
	w0, err := readWatches(ctx, c.Config)
	if err != nil {
		return rd, err
	}
	q0, err := harness.ReadAPIRequests(ctx, c.Config)
	if err != nil {
		return rd, err
	}
	i := (r*37 + 1) % syncs // a different ManifestSync each round
	st, err := openStreams(ctx, ui.url, nStreams, nsName(i), msName(i))
	if err != nil {
		return rd, err
	}
	defer st.close()
	// The handler subscribes as it answers; give the last ones a moment.
	time.Sleep(200 * time.Millisecond)
	wrote := time.Now()
	if err := touch(ctx, cl, i, r); err != nil {
		return rd, err
	}
	seen, last := st.waitSeen(nStreams, seenTimeout)
	rd.streamsSeen = seen
	if seen > 0 {
		rd.changeToAll = last.Sub(wrote)
	}
	time.Sleep(settle)
	rss, err := ui.rss()
	if err != nil {
		return rd, err
	}
	rd.rssAdded = rss - rd.rssBase
	w1, err := readWatches(ctx, c.Config)
	if err != nil {
		return rd, err
	}
	rd.watchesBefore = w0.longrunning
	rd.watchesAdded = w1.longrunning - w0.longrunning
	rd.registeredAdded = -1
	if w0.registered >= 0 && w1.registered >= 0 {
		rd.registeredAdded = w1.registered - w0.registered
	}
	q1, err := harness.ReadAPIRequests(ctx, c.Config)
	if err != nil {
		return rd, err
	}
	rd.apiRequestsByUI, rd.apiRequestsNamed = uiRequests(q1.Sub(q0))
	st.mu.Lock()
	errs := errors.Join(st.errs...)
	st.mu.Unlock()
	if errs != nil {
		return rd, errs
	}
	return rd, nil
}

// uiRequests are the API requests of the streams phase but the
// benchmark's own (its GET and status PUT of the changed ManifestSync)
// and the API server's housekeeping (leases, /metrics): what engine ui
// asked, with the classes named.
func uiRequests(d harness.APIRequests) (float64, string) {
	own := map[harness.APIRequest]float64{
		{Verb: "GET", Group: v1alpha1.GroupVersion.Group, Resource: "manifestsyncs"}:                        1,
		{Verb: "PUT", Group: v1alpha1.GroupVersion.Group, Resource: "manifestsyncs", Subresource: "status"}: 1,
	}
	var n float64
	named := ""
	for _, k := range sortedRequests(d) {
		v := d[k] - own[k]
		if k.Housekeeping() || v <= 0 {
			continue
		}
		n += v
		named += fmt.Sprintf(", %s %s %.0f", k.Verb, resourceName(k), v)
	}
	if named == "" {
		return n, "none"
	}
	return n, named[2:]
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg), or
// "?": the cores are shared with whatever else runs.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
