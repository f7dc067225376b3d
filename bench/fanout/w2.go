package fanout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/manifestsync/manifestsync/bench/harness"
)

const w2 = "W2 steady state"

// Resyncs is the number of resyncs of each round of W2.
const Resyncs = 10

// churnSecrets is the number of unrelated Secrets updated all along W2.
const churnSecrets = 100

const churnNS = "bench-churn"

// cost is what one side's resyncs cost the API server.
type cost struct {
	requests, writes, bumps float64
	detail                  string
}

// W2 forces Resyncs resyncs of the 1,000 unchanged copies per round while
// 100 unrelated Secrets churn, alternating with a Flux-style reconcile of
// the same objects, and counts from the API server's own metrics.
func (f *Fixture) W2(ctx context.Context, rounds int) ([]harness.Row, []string, error) {
	stopChurn, churned, err := f.churn(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer stopChurn()
	var costs [2][]cost
	ours := func() (float64, error) {
		c, err := f.measure(ctx, f.resyncOurs)
		if err != nil {
			return 0, fmt.Errorf("ours: %w", err)
		}
		costs[0] = append(costs[0], c)
		return c.requests, nil
	}
	flux := func() (float64, error) {
		c, err := f.measure(ctx, f.resyncFlux)
		if err != nil {
			return 0, fmt.Errorf("flux-style: %w", err)
		}
		costs[1] = append(costs[1], c)
		return c.requests, nil
	}
	runs, err := harness.Rounds(rounds, ours, flux)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", w2, err)
	}
	pick := func(side int, get func(cost) float64) []float64 {
		var out []float64
		for _, c := range costs[side] {
			out = append(out, get(c))
		}
		return out
	}
	const base = "Flux-style (GET + SSA dry run per object)"
	reqs := harness.Compare(w2, "requests per object per resync", "", runs[0], runs[1], base, "≤ 0.01",
		func(float64) bool { return harness.Median(runs[0]) <= 0.01 })
	writes := harness.Compare(w2, fmt.Sprintf("writes to the copies (%d resyncs)", Resyncs), "", pick(0, func(c cost) float64 { return c.writes }),
		pick(1, func(c cost) float64 { return c.writes }), base, "= 0", func(float64) bool { return harness.Median(pick(0, func(c cost) float64 { return c.writes })) == 0 })
	bumps := harness.Compare(w2, fmt.Sprintf("resourceVersion bumps of the copies (%d resyncs)", Resyncs), "", pick(0, func(c cost) float64 { return c.bumps }),
		pick(1, func(c cost) float64 { return c.bumps }), base, "= 0", func(float64) bool { return harness.Median(pick(0, func(c cost) float64 { return c.bumps })) == 0 })
	for _, r := range []*harness.Row{&reqs, &writes, &bumps} {
		if !r.Pass {
			r.Note = "requests by class in the last round: " + costs[0][len(costs[0])-1].detail
		}
	}
	notes := []string{fmt.Sprintf("W2: requests are apiserver_request_total deltas over each side's %d resyncs, less the API server's housekeeping (leases, /metrics), "+
		"the churn's PUTs of %d unrelated Secrets (%d in all, running through both sides) and the harness's own requests (the requested-at annotation patch of each resync). "+
		"Ours, last round: %s. Flux-style, last round: %s.",
		Resyncs, churnSecrets, churned.Load(), costs[0][len(costs[0])-1].detail, costs[1][len(costs[1])-1].detail)}
	return []harness.Row{reqs, writes, bumps}, notes, nil
}

// measure runs resync Resyncs times and returns its cost per object per
// resync, with the writes and bumps of the copies.
func (f *Fixture) measure(ctx context.Context, resync func(context.Context) (float64, error)) (cost, error) {
	before, err := f.copyVersions(ctx)
	if err != nil {
		return cost{}, err
	}
	time.Sleep(time.Second) // let the list's echo settle
	r0, err := harness.ReadAPIRequests(ctx, f.c.Config)
	if err != nil {
		return cost{}, err
	}
	var own float64
	for range Resyncs {
		n, err := resync(ctx)
		if err != nil {
			return cost{}, err
		}
		own += n
	}
	r1, err := harness.ReadAPIRequests(ctx, f.c.Config)
	if err != nil {
		return cost{}, err
	}
	after, err := f.copyVersions(ctx)
	if err != nil {
		return cost{}, err
	}
	d := r1.Sub(r0)
	counted := func(q harness.APIRequest) bool {
		return !q.Housekeeping() && (q.Verb != "PUT" || q.Resource != "secrets" || q.Subresource != "")
	}
	total := d.Count(counted) - own
	writes := d.Count(func(q harness.APIRequest) bool { return counted(q) && q.Write() && q.Resource == "secrets" })
	var bumps float64
	for k, v := range before {
		if after[k] != v {
			bumps++
		}
	}
	detail := describe(d, counted)
	if own > 0 {
		detail += fmt.Sprintf(", less %.0f of the harness", own)
	}
	return cost{requests: max(total, 0) / float64(Targets*Resyncs), writes: writes, bumps: bumps, detail: detail}, nil
}

// describe lists the requests of d that keep keeps, by class: "GET
// endpoints 1, PATCH manifestsyncs 10".
func describe(d harness.APIRequests, keep func(harness.APIRequest) bool) string {
	var detail []string
	for q, n := range d {
		if keep(q) {
			name := q.Verb + " " + q.Resource
			if q.Subresource != "" {
				name += "/" + q.Subresource
			}
			if q.DryRun {
				name += " (dry run)"
			}
			detail = append(detail, fmt.Sprintf("%s %.0f", name, n))
		}
	}
	sort.Strings(detail)
	if len(detail) == 0 {
		return "none"
	}
	return strings.Join(detail, ", ")
}

// resyncOurs asks the operator for a resync through the requested-at
// annotation and waits for that reconcile to finish; it returns the
// number of requests it made itself.
func (f *Fixture) resyncOurs(ctx context.Context) (float64, error) {
	n0, err := f.op.Reconciles(ctx)
	if err != nil {
		return 0, err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"manifestsync.dev/requested-at":%q}}}`, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := f.dyn.Resource(syncGVR).Namespace(home).Patch(ctx, syncName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := f.op.Reconciles(ctx)
		if err != nil {
			return 0, err
		}
		if n > n0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no reconcile within a minute of requesting one")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 1, nil
}

// resyncFlux is a Flux-style reconcile of the copies: a GET and a
// server-side dry-run apply of the desired object, per object.
func (f *Fixture) resyncFlux(ctx context.Context) (float64, error) {
	src, err := f.cs.CoreV1().Secrets(home).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	version := string(src.Data["version"])
	err = parallel(ctx, f.ns, func(ns string) error {
		live, err := f.cs.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ac := secretApply(ns, secretName, "manifestsync", version).
			WithLabels(map[string]string{ownerLabel: live.Labels[ownerLabel]}).
			WithAnnotations(live.Annotations)
		_, err = f.cs.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "manifestsync", Force: true, DryRun: []string{metav1.DryRunAll}})
		return err
	})
	return 0, err // its requests are the baseline's own
}

// copyVersions lists the copies' resourceVersions.
func (f *Fixture) copyVersions(ctx context.Context) (map[string]string, error) {
	list, err := f.cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + secretName})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		if s.Namespace != home {
			out[s.Namespace] = s.ResourceVersion
		}
	}
	if len(out) != Targets {
		return nil, fmt.Errorf("%d copies, want %d", len(out), Targets)
	}
	return out, nil
}

// churn updates 100 unrelated Secrets round-robin, about 50 a second,
// until stopped.
func (f *Fixture) churn(ctx context.Context) (func(), *atomic.Int64, error) {
	if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: churnNS}}, metav1.CreateOptions{}); err != nil {
		return nil, nil, err
	}
	secrets := make([]*corev1.Secret, churnSecrets)
	for i := range secrets {
		s, err := f.cs.CoreV1().Secrets(churnNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%03d", i)}, Data: data("0")}, metav1.CreateOptions{})
		if err != nil {
			return nil, nil, err
		}
		secrets[i] = s
	}
	var n atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			s := secrets[i%len(secrets)]
			s.Data = data(fmt.Sprint(i))
			if up, err := f.cs.CoreV1().Secrets(churnNS).Update(cctx, s, metav1.UpdateOptions{}); err == nil {
				secrets[i%len(secrets)] = up
				n.Add(1)
			}
		}
	}()
	return func() { cancel(); <-done }, &n, nil
}
