package testenv

import (
	"bytes"
	"context"
	"fmt"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Request is a class of API requests, as the API server labels them in
// its apiserver_request_total counter.
type Request struct {
	Verb        string // GET, LIST, WATCH, POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION
	Group       string // "" for the core group
	Resource    string
	Subresource string
}

// Write reports whether the request changes something.
func (r Request) Write() bool {
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
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
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
	fam := families["apiserver_request_total"]
	if fam == nil {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		var r Request
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				r.Verb = l.GetValue()
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

// Writes sums the write requests, leaving out the API server's own
// housekeeping: the leases it renews every few seconds (its identity and
// the endpoints of the kubernetes Service).
func (r Requests) Writes() float64 {
	return r.Count(func(q Request) bool {
		return q.Write() && q.Group != "coordination.k8s.io"
	})
}
