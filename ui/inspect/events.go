package inspect

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

const (
	// MaxEvents is how many events Events returns, the newest.
	MaxEvents = 200
	// maxEventsListed is how many events one namespace lists, in pages
	// of eventsPage: a namespace flooded with events costs no more.
	maxEventsListed = 2000
	eventsPage      = 500
)

// eventKey names an object as an event's involvedObject does: its group
// (not version), kind, namespace and name.
type eventKey struct {
	group, kind, namespace, name string
}

func (k eventKey) String() string {
	return v1alpha1.ObjectID{Group: k.group, Kind: k.kind, Namespace: k.namespace, Name: k.name}.String()
}

// Events are the core/v1 events of ms and of the objects of targets (as
// Tree returned them, children included), newest first, at most
// MaxEvents. Each namespace is listed once, through c: by the one object's
// name when the namespace holds one, else whole (at most maxEventsListed
// events). Events of cluster-scoped objects are looked for in "default",
// where the API server's clients record them. A namespace the user may
// not list events of is left out, but for ms's own: that is an error.
func Events(ctx context.Context, c client.Reader, ms *v1alpha1.ManifestSync, targets []Target) ([]Event, error) {
	want := map[eventKey]bool{{group: v1alpha1.GroupVersion.Group, kind: "ManifestSync", namespace: ms.Namespace, name: ms.Name}: true}
	var add func(n Node)
	add = func(n Node) {
		want[eventKey{n.Group, n.Kind, n.Namespace, n.Name}] = true
		for _, ch := range n.Children {
			add(ch)
		}
	}
	for _, t := range targets {
		if t.Cluster != "" && t.Cluster != "in-cluster" {
			continue // its events are in its own cluster
		}
		for _, w := range t.Waves {
			for _, n := range w.Nodes {
				add(n)
			}
		}
	}
	byNamespace := map[string][]eventKey{}
	for k := range want {
		ns := k.namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		byNamespace[ns] = append(byNamespace[ns], k)
	}
	var out []Event
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		keys := byNamespace[ns]
		var sel fields.Selector
		if len(keys) == 1 {
			sel = fields.OneTermEqualSelector("involvedObject.name", keys[0].name)
		}
		events, err := listEvents(ctx, c, ns, sel)
		if err != nil {
			if ns == ms.Namespace {
				return nil, fmt.Errorf("events of namespace %s: %w", ns, err)
			}
			continue
		}
		for i := range events {
			e := &events[i]
			gv, _ := schema.ParseGroupVersion(e.InvolvedObject.APIVersion)
			k := eventKey{gv.Group, e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name}
			if !want[k] {
				continue
			}
			out = append(out, Event{
				Object:  k.String(),
				Type:    e.Type,
				Reason:  e.Reason,
				Message: e.Message,
				Count:   countOf(e),
				Last:    lastSeen(e),
				Source:  cmpOr(e.Source.Component, e.ReportingController),
			})
		}
	}
	slices.SortStableFunc(out, func(a, b Event) int {
		return b.Last.Compare(a.Last.Time)
	})
	return out[:min(len(out), MaxEvents)], nil
}

// listEvents lists the events of namespace that sel selects (nil: all),
// maxEventsListed at most.
func listEvents(ctx context.Context, c client.Reader, namespace string, sel fields.Selector) ([]corev1.Event, error) {
	var out []corev1.Event
	cont := ""
	for len(out) < maxEventsListed {
		var list corev1.EventList
		opts := []client.ListOption{client.InNamespace(namespace), client.Limit(eventsPage), client.Continue(cont)}
		if sel != nil {
			opts = append(opts, client.MatchingFieldsSelector{Selector: sel})
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, err
		}
		out = append(out, list.Items...)
		if cont = list.Continue; cont == "" {
			break
		}
	}
	return out, nil
}

// lastSeen is when an event was last seen: its series' last time or its
// lastTimestamp, else its eventTime (events.k8s.io's), else when it was
// first seen or made.
func lastSeen(e *corev1.Event) metav1.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return metav1.Time{Time: e.Series.LastObservedTime.Time}
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp
	}
	return e.CreationTimestamp
}

// countOf is how many times an event was seen: its series' count, else
// its count.
func countOf(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > e.Count {
		return e.Series.Count
	}
	return e.Count
}

// cmpOr is the first of values that is not blank.
func cmpOr(values ...string) string {
	for _, v := range values {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}
