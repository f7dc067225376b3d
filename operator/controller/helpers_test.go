package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// timeout bounds every wait for the operator. It only stops a wait for
// what never comes: how fast the operator is on a loaded machine (make
// test runs at load 15 on 2 cores) is not a unit test's to judge but
// make bench's. Waits that tell an event from a periodic resync give the
// ManifestSync an interval of an hour or more, far beyond it.
const timeout = time.Minute

// eventually calls cond every 50ms until it returns nil, and fails the test
// with its last error when within has passed.
var eventually = testenv.Eventually

// inline is a Starlark transform written in the spec.
func inline(script string) *v1alpha1.Transform {
	return &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: script}}
}

func params(json string) *runtime.RawExtension {
	return &runtime.RawExtension{Raw: []byte(json)}
}

func targets(namespaces ...string) []v1alpha1.Target {
	out := make([]v1alpha1.Target, len(namespaces))
	for i, ns := range namespaces {
		out[i] = v1alpha1.Target{Name: fmt.Sprintf("t%d", i), Namespace: ns}
	}
	return out
}

// createSync creates ms and, when the test ends, deletes it and waits until
// the operator has finalized it.
func createSync(t testing.TB, ms *v1alpha1.ManifestSync) {
	t.Helper()
	env.CreateSync(t, ms, timeout)
}

// updateSync changes a ManifestSync, retrying on conflicts with the
// operator's writes.
func updateSync(t testing.TB, ms *v1alpha1.ManifestSync, change func(*v1alpha1.ManifestSync)) {
	t.Helper()
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		change(cur)
		if err := env.Client.Update(context.Background(), cur); err != nil {
			return err
		}
		*ms = *cur
		return nil
	})
}

// waitFor waits until ms's Ready condition has the reason, for its current
// generation, and returns it.
func waitFor(t testing.TB, ms *v1alpha1.ManifestSync, reason string) *v1alpha1.ManifestSync {
	t.Helper()
	return env.WaitForReason(t, client.ObjectKeyFromObject(ms), reason, timeout)
}

func ready(t testing.TB, ms *v1alpha1.ManifestSync) *v1alpha1.ManifestSync {
	t.Helper()
	return waitFor(t, ms, v1alpha1.ReasonSynced)
}

// gone reports, as an error, whether obj still exists.
func gone(obj client.Object) error { return env.Gone(obj) }

func getConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	return cm, err
}

func mustConfigMap(t testing.TB, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := getConfigMap(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// configMapWith waits until the ConfigMap exists with data[key] == value
// and our owner label.
func configMapWith(t testing.TB, within time.Duration, ms *v1alpha1.ManifestSync, ns, name, key, value string) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	eventually(t, within, func() error {
		var err error
		if cm, err = getConfigMap(ns, name); err != nil {
			return err
		}
		if got := cm.Data[key]; got != value {
			return fmt.Errorf("ConfigMap %s/%s: %s is %q, want %q", ns, name, key, got, value)
		}
		if got := cm.Labels[OwnerLabel]; got != ownerValue(ms) {
			return fmt.Errorf("ConfigMap %s/%s: owner label is %q", ns, name, got)
		}
		return nil
	})
	return cm
}

// waitEvent waits for an event of ms with the reason whose note contains
// one of texts.
func waitEvent(t testing.TB, ms *v1alpha1.ManifestSync, reason string, texts ...string) {
	t.Helper()
	eventually(t, timeout, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ms.Namespace)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name != ms.Name || e.Regarding.Kind != v1alpha1.Kind {
				continue
			}
			if e.Reason == reason && containsAny(e.Note, texts) {
				return nil
			}
			notes = append(notes, e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no %s event with any of %q; events: %q", reason, texts, notes)
	})
}

// warnings are the notes of ms's Warning events in c, to say why a test
// saw a failure.
func warnings(t testing.TB, c client.Reader, ms *v1alpha1.ManifestSync) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ms.Namespace)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Name == ms.Name && e.Regarding.Kind == v1alpha1.Kind && e.Type == corev1.EventTypeWarning {
			notes = append(notes, e.Reason+": "+e.Note)
		}
	}
	return notes
}

func newSync(ns, name string, spec v1alpha1.ManifestSyncSpec) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func condition(ms *v1alpha1.ManifestSync, typ string) metav1.Condition {
	if c := apimeta.FindStatusCondition(ms.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// entriesOf is ms's inventory, from either form; a corrupt one fails t.
func entriesOf(t testing.TB, ms *v1alpha1.ManifestSync) []v1alpha1.InventoryEntry {
	t.Helper()
	entries, err := ms.InventoryEntries()
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// syncFifty syncs a ManifestSync named name of 10 ConfigMaps (c0 to c9)
// into each of 5 new namespaces; it returns it, Ready, and the namespaces.
func syncFifty(t *testing.T, name string) (ms, got *v1alpha1.ManifestSync, nss []string) {
	t.Helper()
	home := env.Namespace(t, nil)
	for range 5 {
		nss = append(nss, env.Namespace(t, nil))
	}
	ms = newSync(home, name, v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"]}`),
		Targets:   targets(nss...),
	})
	createSync(t, ms)
	return ms, ready(t, ms), nss
}
