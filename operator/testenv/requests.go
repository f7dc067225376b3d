package testenv

import (
	"bytes"
	"context"
	"fmt"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Request is a class of requests as the API server labels them in its
// apiserver_request_total counter.
type Request struct {
	Verb        string // GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION
	DryRun      bool   // the request was a dry run (it changed nothing)
	Group       string // "" for the core group
	Resource    string
	Subresource string
}

// Write reports whether the request changes something: a dry run does
// not.
func (r Request) Write() bool {
	if r.DryRun {
		return false
	}
	switch r.Verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// Requests are the API server's request counts by class.
type Requests map[Request]float64

// Requests reads the API server's own request counts from its /metrics
// endpoint, so that a test measures what the server served rather than
// what the code under test thinks it sent.
func (e *Env) Requests(ctx context.Context) (Requests, error) {
	return ReadRequests(ctx, e.Config)
}

// ReadRequests is Requests for any API server (the benchmarks use it).
func ReadRequests(ctx context.Context, cfg *rest.Config) (Requests, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// name[] has the server write this family alone (Prometheus' filter):
	// 19 KB against 2.9 MB of every family, which cost the API server half
	// a second of CPU at each read, and tests read it often.
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").Param("name[]", "apiserver_request_total").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseRequests(raw)
}

func parseRequests(raw []byte) (Requests, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	out := Requests{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var r Request
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				r.Verb = l.GetValue()
			case "dry_run":
				r.DryRun = l.GetValue() != ""
			case "group":
				r.Group = l.GetValue()
			case "resource":
				r.Resource = l.GetValue()
			case "subresource":
				r.Subresource = l.GetValue()
			}
		}
		out[r] += m.GetCounter().GetValue()
	}
	return out, nil
}

// Sub returns the requests made since before.
func (r Requests) Sub(before Requests) Requests {
	out := Requests{}
	for k, v := range r {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Count sums the requests for which keep returns true.
func (r Requests) Count(keep func(Request) bool) float64 {
	var n float64
	for k, v := range r {
		if keep(k) {
			n += v
		}
	}
	return n
}

// Writes sums the write requests, leaving out housekeeping that follows
// no request of the test's: the leases the API server renews every few
// seconds, and the event series a process's event broadcaster patches on
// a timer of its own for events recorded earlier (see EventSeries).
func (r Requests) Writes() float64 {
	return r.Count(func(q Request) bool {
		return q.Write() && q.Group != "coordination.k8s.io" && !q.EventSeries()
	})
}

// EventSeries reports whether the request is an update of an event
// series: client-go's events broadcaster counts a repeated event by
// patching the event it created, and does so for an event recorded long
// before (by any test sharing the process) when its heartbeat fires. A new
// event is a POST and counts as a write.
func (r Request) EventSeries() bool {
	return r.Group == "events.k8s.io" && r.Resource == "events" && r.Verb == "PATCH"
}

// Housekeeping reports whether the API server makes such requests whatever
// the workload: the leases it renews every few seconds, and non-resource
// requests such as a test reading /metrics.
func (r Request) Housekeeping() bool {
	return r.Group == "coordination.k8s.io" || r.Resource == ""
}

// Without is r less the classes of requests drop says are not the
// caller's to count.
func (r Requests) Without(drop func(Request) bool) Requests {
	out := Requests{}
	for k, v := range r {
		if !drop(k) {
			out[k] = v
		}
	}
	return out
}
