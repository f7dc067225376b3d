package inspect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// event records an event about an object in ns, last seen at.
func event(t *testing.T, ns, name, apiVersion, kind, object, reason string, at time.Time) {
	t.Helper()
	create(t, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: object},
		Reason:         reason, Message: reason + " of " + object, Type: corev1.EventTypeNormal,
		Source:        corev1.EventSource{Component: "test"},
		LastTimestamp: metav1.NewTime(at), FirstTimestamp: metav1.NewTime(at), Count: 1,
	})
}

// The events of the ManifestSync and of its tree's objects, children
// included, newest first; not those of other objects of the namespace. A
// user who floods a namespace with events gets at most MaxEvents back.
func TestEvents(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	workload(t, ns)
	ms := syncOf(t, ns, entry(ns, "apps", "v1", "Deployment", "web"))
	ts, err := Tree(ctx, env.Client, ms)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	event(t, ns, "e1", "manifestsync.dev/v1alpha1", "ManifestSync", "app", "Synced", base)
	event(t, ns, "e2", "v1", "Pod", "web-5d4f-a", "Started", base.Add(2*time.Minute))
	event(t, ns, "e3", "apps/v1", "Deployment", "web", "ScalingReplicaSet", base.Add(time.Minute))
	event(t, ns, "e4", "v1", "Pod", "stranger", "Started", base.Add(3*time.Minute))
	event(t, ns, "e5", "v1", "ConfigMap", "web", "SameNameOtherKind", base.Add(4*time.Minute))
	// The operator records through events.k8s.io/v1: no lastTimestamp,
	// an eventTime and a reporting controller.
	create(t, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e6"},
		Regarding:  corev1.ObjectReference{APIVersion: "manifestsync.dev/v1alpha1", Kind: "ManifestSync", Namespace: ns, Name: "app"},
		EventTime:  metav1.NewMicroTime(base.Add(5 * time.Minute)), ReportingController: "manifestsync.dev/operator", ReportingInstance: "test",
		Action: "Sync", Reason: "Applied", Note: "Applied of app", Type: corev1.EventTypeNormal,
	})
	got, err := Events(ctx, env.Client, ms, ts)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range got {
		seen = append(seen, e.Object+" "+e.Reason)
		if e.Source == "" || e.Message != e.Reason+" of "+strings.Fields(e.Object)[1][len(ns)+1:] || e.Last.IsZero() {
			t.Errorf("event %+v", e)
		}
	}
	want := []string{
		"ManifestSync " + ns + "/app Applied",
		"Pod " + ns + "/web-5d4f-a Started",
		"Deployment " + ns + "/web ScalingReplicaSet",
		"ManifestSync " + ns + "/app Synced",
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}

	for i := range MaxEvents + 20 {
		event(t, ns, fmt.Sprintf("flood-%d", i), "manifestsync.dev/v1alpha1", "ManifestSync", "app", "Flood", base.Add(time.Hour+time.Duration(i)*time.Second))
	}
	got, err = Events(ctx, env.Client, ms, ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxEvents || !got[0].Last.Time.Equal(base.Add(time.Hour+(MaxEvents+19)*time.Second)) {
		t.Errorf("%d events, the first of %v: want %d, the newest first", len(got), got[0].Last, MaxEvents)
	}
}

// A user who may not list the events of the ManifestSync's namespace
// gets the API server's refusal.
func TestEventsForbidden(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ms := syncOf(t, ns, entry(ns, "", "v1", "ConfigMap", "cfg"))
	_, err := Events(context.Background(), userClient(t, "nobody"), ms, nil)
	if err == nil || !strings.Contains(err.Error(), `events is forbidden: User "nobody" cannot list resource "events"`) {
		t.Errorf("error %v, want the API server's refusal", err)
	}
}
