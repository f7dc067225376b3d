package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// A selector that does not parse is a usage error naming the flag, before
// the operator reads a kubeconfig or starts anything.
func TestOperatorWatchLabelSelectorInvalid(t *testing.T) {
	for _, sel := range []string{"shard in (a", "=a", "shard==a==b", "a b"} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"operator", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--watch-label-selector", sel}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--watch-label-selector") {
			t.Errorf("--watch-label-selector %q: exit %d, stderr %q; want exit %d naming the flag", sel, code, stderr.String(), exitUsage)
		}
	}
	for sel, want := range map[string]string{"": "", "  ": "", "sharding.fluxcd.io/key=shard1": "sharding.fluxcd.io/key=shard1", "!sharding.fluxcd.io/key": "!sharding.fluxcd.io/key"} {
		got, err := manifestSyncSelector(&operatorFlags{watchLabelSelector: sel})
		if err != nil || got.String() != want {
			t.Errorf("manifestSyncSelector(%q) = %v, %v; want %q", sel, got, err, want)
		}
	}
	// The lease of an operator without the flag keeps its name; a
	// selector's is its own, whatever the order of its requirements.
	one, _ := manifestSyncSelector(&operatorFlags{watchLabelSelector: "b=2,a=1"})
	two, _ := manifestSyncSelector(&operatorFlags{watchLabelSelector: "a=1, b=2"})
	other, _ := manifestSyncSelector(&operatorFlags{watchLabelSelector: "a=1"})
	if id := leaderElectionID(labels.Everything()); id != "manifestsync.dev" {
		t.Errorf("the lease without a selector is %q, want manifestsync.dev", id)
	}
	if leaderElectionID(one) != leaderElectionID(two) || leaderElectionID(one) == leaderElectionID(other) || !strings.HasPrefix(leaderElectionID(one), "manifestsync.dev-") {
		t.Errorf("leases %q, %q, %q: want the first two equal, the third another", leaderElectionID(one), leaderElectionID(two), leaderElectionID(other))
	}
}

// shardSync makes the ConfigMap named like the ManifestSync, holding v,
// in its namespace; labels are the ManifestSync's.
func shardSync(ns, name, v string, labels map[string]string) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": ctx.params["name"]}, "data": {"v": ctx.params["v"]}}]
`}},
			Params:  &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"name": %q, "v": %q}`, name, v)},
			Targets: []v1alpha1.Target{{Name: "here", Namespace: ns}},
		},
	}
}

// Two operators shard by hand, as Flux's controllers do: one with
// --watch-label-selector shard=a, one with shard=b. Each syncs only the
// ManifestSyncs of its shard (a ManifestSync of neither is synced by
// none); a ManifestSync relabelled from a to b is taken up by b, and a
// writes nothing of it after that and prunes nothing. Who wrote what, and
// when, comes from the API server's audit log.
func TestOperatorWatchLabelSelector(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.log")
	env := ownEnv(t, testenv.WithAuditLog(audit))
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	// With leader election, as the chart runs them: each shard elects
	// its own leader, or one shard would stand by for the other.
	leaderArgs := []string{"--leader-elect", "--leader-election-namespace", ns}
	a := startEngineOperatorAs(t, env, "operator-a", append(leaderArgs, "--watch-label-selector", "shard=a")...)
	b := startEngineOperatorAs(t, env, "operator-b", append(leaderArgs, "--watch-label-selector", "shard=b")...)
	for _, ms := range []*v1alpha1.ManifestSync{
		shardSync(ns, "sync-a", "one", map[string]string{"shard": "a"}),
		shardSync(ns, "sync-b", "one", map[string]string{"shard": "b"}),
		shardSync(ns, "sync-none", "one", nil),
	} {
		if err := env.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	configMapHas(t, env, ns, "sync-a", "one", time.Minute)
	configMapHas(t, env, ns, "sync-b", "one", time.Minute)
	// Long enough for either to have taken up what it should not have.
	time.Sleep(3 * time.Second)
	none := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sync-none"}, none); err != nil {
		t.Fatal(err)
	}
	if len(none.Finalizers) != 0 || len(none.Status.Conditions) != 0 {
		t.Errorf("the ManifestSync of no shard was reconciled: finalizers %v, conditions %v", none.Finalizers, none.Status.Conditions)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sync-none"}, &corev1.ConfigMap{}); err == nil {
		t.Errorf("the ManifestSync of no shard was applied")
	}

	// Relabel sync-a into shard b and change what it makes, in one write.
	// Read and written again on a conflict: the operator writes the
	// status in between.
	var moved time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sync-a"}, ms); err != nil {
			return err
		}
		ms.Labels["shard"] = "b"
		ms.Spec.Params = shardSync(ns, "sync-a", "two", nil).Spec.Params
		moved = time.Now()
		return env.Client.Update(ctx, ms)
	})
	if err != nil {
		t.Fatal(err)
	}
	configMapHas(t, env, ns, "sync-a", "two", time.Minute)
	// And once more, now that b holds it.
	setShardSync(t, env, ns, "sync-a", "three")
	configMapHas(t, env, ns, "sync-a", "three", time.Minute)
	time.Sleep(2 * time.Second)
	a.stop(t)
	b.stop(t)

	events, err := testenv.ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	// The API server stamps a request when it reads it: one a sent just
	// before the move may be read a little after.
	const receiptSkew = 250 * time.Millisecond
	wrote := map[string]map[string]int{} // user -> "resource/name" -> writes
	for _, ev := range events {
		user := ev.User.Username
		if (user != "operator-a" && user != "operator-b") || ev.ObjectRef.Namespace != ns {
			continue
		}
		switch ev.Verb {
		case "get", "list", "watch":
			continue
		case "delete", "deletecollection":
			t.Errorf("%s deleted %s %s: nothing was deleted, nothing may be pruned", user, ev.ObjectRef.Resource, ev.ObjectRef.Name)
		}
		what := ev.ObjectRef.Resource + "/" + ev.ObjectRef.Name
		if ev.ObjectRef.Resource == "events" {
			continue // named by the event, not by its object
		}
		if wrote[user] == nil {
			wrote[user] = map[string]int{}
		}
		wrote[user][what]++
		switch {
		case strings.HasSuffix(what, "/sync-none"):
			t.Errorf("%s %s %s (of no shard)", user, ev.Verb, what)
		case user == "operator-a" && strings.HasSuffix(what, "/sync-b"), user == "operator-b" && strings.HasSuffix(what, "/sync-a") && ev.RequestReceivedTimestamp.Before(moved):
			t.Errorf("%s %s %s at %s, of the other shard", user, ev.Verb, what, ev.RequestReceivedTimestamp.Format(time.StampMilli))
		case user == "operator-a" && strings.HasSuffix(what, "/sync-a") && ev.RequestReceivedTimestamp.After(moved.Add(receiptSkew)):
			t.Errorf("operator-a %s %s at %s, after sync-a moved to shard b (%s)", ev.Verb, what, ev.RequestReceivedTimestamp.Format(time.StampMilli), moved.Format(time.StampMilli))
		}
	}
	for user, objs := range map[string][]string{"operator-a": {"configmaps/sync-a", "manifestsyncs/sync-a"}, "operator-b": {"configmaps/sync-a", "configmaps/sync-b", "manifestsyncs/sync-a", "manifestsyncs/sync-b"}} {
		for _, o := range objs {
			if wrote[user][o] == 0 {
				t.Errorf("%s never wrote %s; wrote %v", user, o, wrote[user])
			}
		}
	}
	t.Logf("writes: %v", wrote)
	leases := &coordinationv1.LeaseList{}
	if err := env.Client.List(ctx, leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	if want := []string{leaderElectionID(labels.SelectorFromSet(labels.Set{"shard": "a"})), leaderElectionID(labels.SelectorFromSet(labels.Set{"shard": "b"}))}; !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(want))) {
		t.Errorf("leases %v, want one per shard: %v", names, want)
	}
}
