package w9

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

func auditEvent(user, verb, resource, ns, name string, code int, at time.Time) testenv.AuditEvent {
	var ev testenv.AuditEvent
	ev.Verb, ev.User.Username = verb, user
	ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name = resource, ns, name
	ev.ResponseStatus.Code, ev.RequestReceivedTimestamp = code, at
	return ev
}

// DoubleWrites counts a ConfigMap written by two replicas within the
// window, once, and nothing else: not one replica writing twice, not a
// move a second or more apart, not a writer that is no replica, not a
// write the API server refused, not another kind.
func TestDoubleWrites(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ms := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Millisecond) }
	events := []testenv.AuditEvent{
		// Two replicas 500 ms apart, and once more 300 ms: one double.
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "twice", 200, ms(0)),
		auditEvent("w9-run1-b", "patch", "configmaps", "ns", "twice", 200, ms(500)),
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "twice", 200, ms(800)),
		// A move 1.5 s after the last write: no double.
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "moved", 201, ms(0)),
		auditEvent("w9-run1-b", "patch", "configmaps", "ns", "moved", 200, ms(1500)),
		// The later of one replica's two writes is within the window of
		// the other's (listed out of order).
		auditEvent("w9-run1-b", "update", "configmaps", "ns", "late", 200, ms(1200)),
		auditEvent("w9-run1-a", "create", "configmaps", "ns", "late", 201, ms(0)),
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "late", 200, ms(900)),
		// One replica twice, a stranger, a refused write, a status and
		// a Secret: none.
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "own", 200, ms(0)),
		auditEvent("w9-run1-a", "patch", "configmaps", "ns", "own", 200, ms(10)),
		auditEvent("admin", "patch", "configmaps", "ns", "own", 200, ms(20)),
		auditEvent("w9-run1-b", "patch", "configmaps", "ns", "own", 409, ms(30)),
		auditEvent("w9-run1-b", "get", "configmaps", "ns", "own", 200, ms(40)),
		auditEvent("w9-run1-b", "patch", "secrets", "ns", "own", 200, ms(50)),
		// The same name in another namespace is another object.
		auditEvent("w9-run1-b", "patch", "configmaps", "other", "own", 200, ms(60)),
		// A replica of another run writes one of this run's 100 ms
		// after: another object, deleted and made again.
		auditEvent("w9-run2-a", "patch", "configmaps", "ns", "own", 200, ms(110)),
	}
	doubles, st := DoubleWrites(events, replicaRun, time.Second)
	if len(doubles) != 2 {
		t.Fatalf("doubles %+v, want ns/late and ns/twice", doubles)
	}
	if d := doubles[0]; d.Run != "run1" || d.Object != "ns/late" || d.First != "w9-run1-a" || d.Second != "w9-run1-b" || d.Apart != 300*time.Millisecond {
		t.Errorf("first double %+v, want ns/late by w9-a then w9-b 300ms apart", d)
	}
	if d := doubles[1]; d.Object != "ns/twice" || d.Apart != 300*time.Millisecond {
		t.Errorf("second double %+v, want ns/twice at its closest, 300ms", d)
	}
	want := WriteStats{Writes: 12, Objects: 6, Moved: 3, Closest: 300 * time.Millisecond, Users: 3}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// W9 in small: 60 ManifestSyncs over 2 replicas of bin/engine (a third
// joins and leaves, one of the two is killed), on a control plane of its
// own with the audit log. The rows render; the killed replica's
// ManifestSyncs were synced only after its Lease expired; the audit log
// shows both replicas writing every ConfigMap, none written by two within
// a second; and two writers injected afterwards are counted.
func TestSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a kube-apiserver and bin/engine; skipped under -short")
	}
	ctx := context.Background()
	dir := t.TempDir()
	c, err := harness.StartCluster(dir, harness.WithWriteAudit("configmaps"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	engine, err := enginebuild.Image(ctx, c.Root, filepath.Join(dir, "image"))
	if err != nil {
		t.Fatal(err)
	}
	const syncs = 60
	res, err := Measure(ctx, c, Config{Syncs: syncs, Replicas: []int{2}, Rounds: 1, Engine: engine, Logs: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var report bytes.Buffer
	if err := (&harness.Report{Rows: res.Rows, Notes: res.Notes}).Write(&report); err != nil {
		t.Fatal(err)
	}
	t.Log(report.String())
	row := func(prefix string) harness.Row {
		for _, r := range res.Rows {
			if strings.HasPrefix(r.Metric, prefix) {
				return r
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, report.String())
		return harness.Row{}
	}
	if n := strings.Count(report.String(), "\n| W9 sharding |"); n != len(res.Rows) || n < 8 {
		t.Errorf("%d W9 rows rendered of %d", n, len(res.Rows))
	}
	if r := row("kill -9"); r.Ours <= 0 {
		t.Errorf("the killed replica's ManifestSyncs were all synced %.1f s after its Lease expired: before it", r.Ours)
	}
	if r := row("ManifestSyncs taken from the killed"); r.Ours != 0 {
		t.Errorf("%v ManifestSyncs left the killed replica before its Lease expired", r.Ours)
	}
	if r := row("ManifestSyncs moved when"); r.Ours == 0 || r.Ours >= syncs {
		t.Errorf("a join moved %v of %d", r.Ours, syncs)
	}
	w := res.Writes
	if w.Objects != syncs*objects || w.Users < 2 || w.Writes <= w.Objects || w.Moved == 0 {
		t.Errorf("the audit log counted %+v: want %d ConfigMaps, each written at its creation, those moved or changed again, by both replicas", w, syncs*objects)
	}
	if len(res.Doubles) != 0 {
		t.Errorf("ConfigMaps written by two replicas within 1s: %+v", res.Doubles)
	}

	// Two writers of one ConfigMap within a second are counted, from the
	// same audit log.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces()[0], Name: "intruded"}, Data: map[string]string{"v": "a"}}
	for i, user := range []string{userPrefix + "intruders-a", userPrefix + "intruders-b"} {
		kc, err := c.UserKubeconfig(user)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(kc)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(cfg, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = cl.Create(ctx, cm)
		} else {
			err = cl.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"b"}}`)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	doubles, _, err := CountDoubles(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if len(doubles) != 1 || doubles[0].Object != namespaces()[0]+"/intruded" || doubles[0].First != userPrefix+"intruders-a" {
		t.Errorf("after two writers of one ConfigMap: doubles %+v, want that ConfigMap", doubles)
	}
}
