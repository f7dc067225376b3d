package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A namespaceSelector target follows the namespaces: one created or
// labelled later gets the objects at once, one that stops matching loses
// them.
func TestNamespaceSelector(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	team := map[string]string{"team": home} // unique to this test
	first := env.Namespace(t, team)
	ms := newSync(home, "selector", v1alpha1.ManifestSyncSpec{
		Transform: inline(namesScript),
		Params:    params(`{"names": ["shared"]}`),
		Targets:   []v1alpha1.Target{{Name: "team", NamespaceSelector: &metav1.LabelSelector{MatchLabels: team}}},
	})
	createSync(t, ms)
	got := ready(t, ms)
	configMapWith(t, timeout, ms, first, "shared", "target", "team")
	if len(got.Status.Targets) != 1 || got.Status.Targets[0].Namespace != first {
		t.Errorf("targets %+v", got.Status.Targets)
	}

	start := time.Now()
	created := env.Namespace(t, team)
	configMapWith(t, timeout, ms, created, "shared", "target", "team")
	t.Logf("a new namespace got its objects after %v", time.Since(start).Round(time.Millisecond))

	later := env.Namespace(t, nil)
	ns := &corev1.Namespace{}
	if err := env.Client.Get(ctx, keyOf("", later), ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = team
	if err := env.Client.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	configMapWith(t, timeout, ms, later, "shared", "target", "team")
	t.Logf("a relabelled namespace got its objects after %v", time.Since(start).Round(time.Millisecond))

	if err := env.Client.Get(ctx, keyOf("", first), ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels = nil
	if err := env.Client.Update(ctx, ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error {
		return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: first, Name: "shared"}})
	})
	// The status is written after the prune: it follows.
	eventually(t, timeout, func() error {
		got = ready(t, ms)
		if len(got.Status.Targets) != 2 || len(entriesOf(t, got)) != 2 {
			return fmt.Errorf("targets %+v, inventory %+v", got.Status.Targets, entriesOf(t, got))
		}
		return nil
	})
}
