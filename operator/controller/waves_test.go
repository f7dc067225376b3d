package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A CRD, 20 of its custom resources and the namespace they live in, in
// one target, sync in the first reconcile on a cluster that has none of
// them: the CRD is applied and Established first, then the namespace,
// then the rest.
func TestCRDAndItsResourcesInOneTarget(t *testing.T) {
	env.Need(t)
	home := env.Namespace(t, nil)
	ns := home + "-app"
	group := home + ".crd.example.com"
	docs := []string{"apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n"}
	for i := range 20 {
		docs = append(docs, widgetDoc(group, fmt.Sprintf("w%02d", i), 0))
	}
	docs = append(docs, widgetCRD(group)) // last: the order is the operator's to make
	ms := newSync(home, "crd", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(docs...),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := ready(t, ms)
	if n := recorded.count(ms, EventSyncFailed); n != 0 {
		t.Errorf("%d SyncFailed events; the first reconcile should have synced", n)
	}
	if len(got.Status.History) != 1 || got.Status.History[0].Result != v1alpha1.ReasonSynced {
		t.Errorf("history %+v", got.Status.History)
	}
	if len(entriesOf(t, got)) != 22 {
		t.Errorf("inventory has %d objects, want 22", len(entriesOf(t, got)))
	}
	if row := targetRow(t, got); row.Health != v1alpha1.HealthUnknown {
		// Widgets have no status and no rule.
		t.Errorf("row %+v, want Unknown health", row)
	}
}

// Inside a wave a PersistentVolumeClaim (never bound here: no storage)
// comes before the CRD, in Argo CD's order: only the CRD is awaited
// before the custom resources. Waiting for the claim as for a CRD would
// hold the sync establishTimeout.
func TestOnlyCRDsAwaitedInTheirWave(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	group := ns + ".crd.example.com"
	claim := `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`
	ms := newSync(ns, "crd", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(widgetDoc(group, "w", 0), claim, widgetCRD(group)),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	start := time.Now()
	createSync(t, ms)
	got := ready(t, ms)
	if took := time.Since(start); took >= establishTimeout {
		t.Errorf("synced after %s: the claim was awaited as a CRD", took.Round(time.Millisecond))
	}
	if n := len(entriesOf(t, got)); n != 3 {
		t.Errorf("inventory has %d objects, want 3", n)
	}
}

// watchLog records the ADDED and DELETED events of ConfigMaps and
// Deployments of a namespace, with their resourceVersions, which etcd
// orders.
type watchLog struct {
	mu     sync.Mutex
	events []seenEvent
	errs   []string // error events: the log may lack events
}

type seenEvent struct {
	typ  watch.EventType
	kind string
	name string
	rv   int64
}

func watchNamespace(t testing.TB, ns string) *watchLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	rec := &watchLog{}
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &metav1.PartialObjectMetadataList{}} {
		if l, ok := list.(*metav1.PartialObjectMetadataList); ok {
			l.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("DeploymentList"))
		}
		// From the revision of a list: a watch from "now" may be refused
		// by an API server whose watch cache is behind.
		if err := wc.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		rv := list.(metav1.ListInterface).GetResourceVersion()
		w, err := wc.Watch(context.Background(), list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				if e.Type == watch.Error {
					rec.mu.Lock()
					rec.errs = append(rec.errs, fmt.Sprintf("%+v", e.Object))
					rec.mu.Unlock()
				}
				obj, ok := e.Object.(client.Object)
				if !ok || (e.Type != watch.Added && e.Type != watch.Deleted) {
					continue
				}
				rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
				kind := "ConfigMap"
				if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
					kind = "Deployment"
				}
				rec.mu.Lock()
				rec.events = append(rec.events, seenEvent{typ: e.Type, kind: kind, name: obj.GetName(), rv: rv})
				rec.mu.Unlock()
			}
		}()
	}
	return rec
}

// find returns the event of the object, or false. It fails the test when
// a watch failed: what it did not see cannot be told from what did not
// happen.
func (r *watchLog) find(t testing.TB, typ watch.EventType, kind, name string) (seenEvent, bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		t.Fatalf("watch failed: %s", r.errs)
	}
	for _, e := range r.events {
		if e.typ == typ && e.kind == kind && e.name == name {
			return e, true
		}
	}
	return seenEvent{}, false
}

// Waves: no wave-1 object exists before every wave-0 object is Current,
// the next wave starts on the watch event of the last one turning
// Current, and pruning goes in reverse wave order.
func TestWaves(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	rec := watchNamespace(t, ns)
	cm := func(name string, wave int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, annotations: {manifestsync.dev/wave: \"%d\"}}\n", name, wave)
	}
	ms := newSync(home, "waves", waitingSpec(objectsOf(cm("late", 1), deploymentDoc("db", 1, 0), deploymentDoc("cache", 1, 0), cm("early", -1), cm("last", 2)), ns, time.Minute))
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonProgressing)
	row := targetRow(t, got)
	if row.State != v1alpha1.TargetPending || !strings.HasPrefix(row.Message, "wave 1 waits for wave 0 to be Current: Deployment "+ns+"/") {
		t.Errorf("row %+v", row)
	}
	if _, err := getConfigMap(ns, "early"); err != nil {
		t.Errorf("wave -1: %v", err)
	}
	rollOut(t, ns, "db")
	time.Sleep(500 * time.Millisecond)
	if _, ok := rec.find(t, watch.Added, "ConfigMap", "late"); ok {
		t.Fatal("wave 1 started while a wave-0 Deployment is not Current")
	}
	current := rollOut(t, ns, "cache")
	done := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, 2*time.Second)
	if row := targetRow(t, done); row.State != v1alpha1.TargetSynced || row.Health != v1alpha1.HealthHealthy {
		t.Errorf("row %+v", row)
	}
	var late, last seenEvent
	eventually(t, time.Second, func() error {
		var ok1, ok2 bool
		late, ok1 = rec.find(t, watch.Added, "ConfigMap", "late")
		last, ok2 = rec.find(t, watch.Added, "ConfigMap", "last")
		if !ok1 || !ok2 {
			_, err1 := getConfigMap(ns, "late")
			_, err2 := getConfigMap(ns, "last")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return fmt.Errorf("the ConfigMaps of waves 1 and 2 were not seen created (%v, %v): %+v", err1, err2, rec.events)
		}
		return nil
	})
	if n, _ := strconv.ParseInt(current, 10, 64); late.rv <= n {
		t.Errorf("wave 1 was created at revision %d, before wave 0 was Current at %d", late.rv, n)
	}
	if last.rv <= late.rv {
		t.Errorf("wave 2 was created at revision %d, before wave 1 at %d", last.rv, late.rv)
	}

	// Pruned last wave first.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = objectsOf(cm("early", -1))
	})
	waitFor(t, ms, v1alpha1.ReasonSynced)
	var order []seenEvent
	eventually(t, time.Second, func() error {
		order = order[:0]
		for _, o := range []struct{ kind, name string }{{"ConfigMap", "last"}, {"ConfigMap", "late"}, {"Deployment", "db"}} {
			e, ok := rec.find(t, watch.Deleted, o.kind, o.name)
			if !ok {
				return fmt.Errorf("%s %s was not seen deleted", o.kind, o.name)
			}
			order = append(order, e)
		}
		return nil
	})
	if !(order[0].rv < order[1].rv && order[1].rv < order[2].rv) {
		t.Errorf("pruned in the order %+v, want the last wave first", order)
	}

	// Deleting the ManifestSync deletes its objects last wave first too.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = objectsOf(cm("early", -1), cm("then", 1), cm("finally", 2))
	})
	waitFor(t, ms, v1alpha1.ReasonSynced)
	if err := env.Client.Delete(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error { return gone(ms) })
	eventually(t, time.Second, func() error {
		order = order[:0]
		for _, name := range []string{"finally", "then", "early"} {
			e, ok := rec.find(t, watch.Deleted, "ConfigMap", name)
			if !ok {
				return fmt.Errorf("ConfigMap %s was not seen deleted", name)
			}
			order = append(order, e)
		}
		return nil
	})
	if !(order[0].rv < order[1].rv && order[1].rv < order[2].rv) {
		t.Errorf("deleted in the order %+v, want the last wave first", order)
	}
}
