package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// leaderScript makes the ConfigMaps "cm-0".."cm-(n-1)" holding
// ctx.params["v"].
const leaderScript = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-%d" % i}, "data": {"v": ctx.params["v"]}} for i in range(ctx.params["n"])]
`

func leaderSync(ns string, n int, v string) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: leaderScript}},
			Params:    &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"n": %d, "v": %q}`, n, v)},
			Targets:   []v1alpha1.Target{{Name: "here", Namespace: ns}},
		},
	}
}

// setParam changes the ManifestSync's params.v.
func setParam(t *testing.T, env *testenv.Env, ns string, n int, v string) {
	t.Helper()
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, ms); err != nil {
		t.Fatal(err)
	}
	ms.Spec.Params = leaderSync(ns, n, v).Spec.Params
	if err := env.Client.Update(context.Background(), ms); err != nil {
		t.Fatal(err)
	}
}

// configMapHas waits, at most within, until the ConfigMap holds v.
func configMapHas(t *testing.T, env *testenv.Env, ns, name, v string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
			return err
		}
		if cm.Data["v"] != v {
			return fmt.Errorf("ConfigMap %s/%s holds %q, want %q", ns, name, cm.Data["v"], v)
		}
		return nil
	})
}

// Two operators with --leader-elect: one leads and writes, the other
// writes nothing; when the leader is killed the other takes over within
// the lease's 15 s; when a leader stops (SIGTERM) it hands its lease over
// at once. Who wrote what and when comes from the API server's audit log.
func TestOperatorLeaderHandOver(t *testing.T) {
	audit := filepath.Join(t.TempDir(), "audit.log")
	env := ownEnv(t, testenv.WithAuditLog(audit))
	ns := env.Namespace(t, nil)
	leaderArgs := []string{"--leader-elect", "--leader-election-namespace", ns}
	acquired := "acquired lease"

	a := startEngineOperatorAs(t, env, "operator-a", leaderArgs...)
	testenv.Eventually(t, time.Minute, func() error {
		if !strings.Contains(a.logs.String(), acquired) {
			return fmt.Errorf("operator-a has not acquired the lease:\n%s", a.logs.String())
		}
		return nil
	})
	b := startEngineOperatorAs(t, env, "operator-b", leaderArgs...)
	if err := env.Client.Create(context.Background(), leaderSync(ns, 3, "one")); err != nil {
		t.Fatal(err)
	}
	configMapHas(t, env, ns, "cm-2", "one", 30*time.Second)
	// Long enough for the follower to try the lease a few times.
	time.Sleep(5 * time.Second)

	killed := time.Now()
	a.kill(t)
	setParam(t, env, ns, 3, "two")
	configMapHas(t, env, ns, "cm-2", "two", time.Minute)
	handOver := time.Since(killed)
	t.Logf("hand-over after the leader was killed: %s", handOver.Round(time.Millisecond))

	c := startEngineOperatorAs(t, env, "operator-c", leaderArgs...)
	time.Sleep(3 * time.Second) // c is a follower now, trying the lease
	stopped := time.Now()
	if logs := b.stop(t); !strings.Contains(logs, acquired) {
		t.Fatalf("operator-b never acquired the lease:\n%s", logs)
	}
	stoppedAt := time.Now()
	setParam(t, env, ns, 3, "three")
	configMapHas(t, env, ns, "cm-2", "three", time.Minute)
	release := time.Since(stopped)
	t.Logf("hand-over after the leader was stopped: %s", release.Round(time.Millisecond))
	// A stopped leader releases its lease; the follower retries every 2 s.
	// A lease not released would expire 15 s after its last renewal (every
	// 2 s), so at least 13 s after the stop: under 12 s, it was released,
	// however loaded the machine.
	if release > 12*time.Second {
		t.Errorf("operator-c applied the change %s after operator-b was stopped; want within 12s (the lease was not released)", release)
	}
	c.stop(t)

	events, err := testenv.ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	// Each operator's writes (the lease included) fall in its own time as
	// leader: a before it was killed, b after that and before it stopped,
	// c after b stopped.
	// The API server stamps a request when it reads it: one that b sent
	// as it exited (an event flushed at shutdown) is read after b.stop
	// returned, within the receipt skew.
	const receiptSkew = 250 * time.Millisecond
	window := map[string][2]time.Time{
		"operator-a": {time.Time{}, killed},
		"operator-b": {killed, stoppedAt.Add(receiptSkew)},
		"operator-c": {stopped, time.Now()},
	}
	wrote := map[string]map[string]int{}
	for _, ev := range events {
		w, ok := window[ev.User.Username]
		if !ok {
			continue
		}
		what := ev.ObjectRef.Resource
		if wrote[ev.User.Username] == nil {
			wrote[ev.User.Username] = map[string]int{}
		}
		wrote[ev.User.Username][what]++
		at := ev.RequestReceivedTimestamp
		if at.Before(w[0]) || at.After(w[1]) {
			t.Errorf("%s %s %s %s/%s at %s, outside its time as leader (%s to %s)", ev.User.Username, ev.Verb, what,
				ev.ObjectRef.Namespace, ev.ObjectRef.Name, at.Format(time.StampMilli), w[0].Format(time.StampMilli), w[1].Format(time.StampMilli))
		}
	}
	// b took the lease over (its first write of it) within the lease
	// duration and a retry period of a's death (17 s), and room for a
	// loaded machine: a lease never taken over would fail it too.
	for _, ev := range events {
		if ev.User.Username == "operator-b" && ev.ObjectRef.Resource == "leases" {
			took := ev.RequestReceivedTimestamp.Sub(killed)
			t.Logf("operator-b took the lease %s after operator-a was killed", took.Round(time.Millisecond))
			if took > 40*time.Second {
				t.Errorf("operator-b took the lease %s after operator-a was killed; want within 40s", took)
			}
			break
		}
	}
	for _, ev := range events {
		if ev.User.Username == "operator-b" && ev.ObjectRef.Resource == "configmaps" {
			t.Logf("operator-b's first write of a ConfigMap: %s after operator-a was killed", ev.RequestReceivedTimestamp.Sub(killed).Round(time.Millisecond))
			break
		}
	}
	for _, user := range []string{"operator-a", "operator-b", "operator-c"} {
		if wrote[user]["configmaps"] == 0 || wrote[user]["leases"] == 0 {
			t.Errorf("%s wrote %v; want ConfigMaps and its lease", user, wrote[user])
		}
	}
	t.Logf("writes: %v", wrote)
}

// An operator told to stop (SIGTERM) while it applies a target finishes
// the target and records it in status before it exits: nothing is left
// half-applied.
func TestOperatorShutdownFinishesApply(t *testing.T) {
	env := ownEnv(t)
	ns := env.Namespace(t, nil)
	const n = 150
	// A client-side limit makes the apply last a few seconds.
	op := startEngineOperatorAs(t, env, "operator", "--kube-api-qps", "30")
	if err := env.Client.Create(context.Background(), leaderSync(ns, n, "one")); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		list := &corev1.ConfigMapList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{"manifestsync.dev/owner": ns + ".app"}); err != nil {
			t.Fatal(err)
		}
		return len(list.Items)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if count() == 0 {
			return fmt.Errorf("no ConfigMap applied yet")
		}
		return nil
	})
	applied := count()
	start := time.Now()
	logs := op.stop(t) // SIGTERM; it must exit cleanly
	t.Logf("stopped %s after SIGTERM, with %d of %d ConfigMaps applied when it came", time.Since(start).Round(time.Millisecond), applied, n)
	if applied == n {
		t.Fatalf("the apply was over before SIGTERM; the test proves nothing")
	}
	if got := count(); got != n {
		t.Errorf("%d of %d ConfigMaps applied after a graceful stop:\n%s", got, n, logs)
	}
	ms := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "app"}, ms); err != nil {
		t.Fatal(err)
	}
	if c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || len(ms.Status.Inventory) != n {
		t.Errorf("after a graceful stop: Ready %+v, %d inventory entries; want Ready and %d", c, len(ms.Status.Inventory), n)
	}
}

// A leader that cannot renew its lease within the renew deadline (the API
// server is down) exits, rather than go on writing when a standby may have
// taken over; its pod restarts it.
func TestOperatorLeaderExitsWhenItCannotRenew(t *testing.T) {
	env := ownEnv(t)
	ns := env.Namespace(t, nil)
	op := startEngineOperatorAs(t, env, "operator", "--leader-elect", "--leader-election-namespace", ns,
		"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "1s")
	testenv.Eventually(t, time.Minute, func() error {
		if !strings.Contains(op.logs.String(), "acquired lease") {
			return fmt.Errorf("the operator has not acquired the lease:\n%s", op.logs.String())
		}
		return nil
	})
	if err := env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-op.exited:
		op.stopped = true
		if err == nil {
			t.Errorf("the operator exited cleanly after losing its lease; want a failure")
		}
		if logs := op.logs.String(); !strings.Contains(logs, "leader election lost") {
			t.Errorf("the operator's logs do not say it lost the lease:\n%s", logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the operator still runs a minute after the API server went down, its renew deadline 3s:\n%s", op.logs.String())
	}
}
