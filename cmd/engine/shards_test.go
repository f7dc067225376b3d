package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
	"github.com/manifestsync/manifestsync/operator/testenv"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// Bad --shards, --shard-id and Lease timings are usage errors naming the
// flag; good timings reach the Member; the cache of a replica selects its
// own share within --watch-label-selector.
func TestOperatorShardsFlags(t *testing.T) {
	for _, args := range [][]string{{"--shards", "on"}, {"--shards", "auto", "--shard-id", "Not_A_Label"}, {"--shards", "auto", "--shard-id", "a"}} {
		var stdout, stderr bytes.Buffer
		t.Setenv("POD_NAMESPACE", "")
		code := run(append([]string{"operator", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--shard") {
			t.Errorf("engine operator %v: exit %d, stderr %q; want %d naming the flag", args, code, stderr.String(), exitUsage)
		}
	}
	// Lease timings that would let the fence fall at or after the Lease's
	// expiry (two owners at once), or renew only once before it falls,
	// are refused before anything starts, naming the flags.
	ns := []string{"--shards", "auto", "--shard-id", "a", "--leader-election-namespace", "ops"}
	for _, args := range [][]string{{"--shard-renew-deadline", "15s"}, {"--shard-renew-deadline", "20s"},
		{"--shard-retry-period", "5s"}, {"--shard-lease-duration", "2500ms", "--shard-renew-deadline", "2s", "--shard-retry-period", "500ms"}} {
		var stdout, stderr bytes.Buffer
		code := run(append(append([]string{"operator", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, ns...), args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--shard-renew-deadline") {
			t.Errorf("engine operator %v: exit %d, stderr %q; want %d naming the timing flags", args, code, stderr.String(), exitUsage)
		}
	}
	// Those given reach the replica's Member.
	f := &operatorFlags{leaderElectNS: "ops"}
	f.shards = shardFlags{mode: "auto", id: "a", leaseDuration: 6 * time.Second, renewDeadline: 4 * time.Second, retryPeriod: time.Second}
	s, err := newSharding(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.guard(&rest.Config{Host: "http://127.0.0.1:1"}, runtime.NewScheme()); err != nil {
		t.Fatal(err)
	}
	if m := s.member; m.LeaseDuration != 6*time.Second || m.RenewDeadline != 4*time.Second || m.RetryPeriod != time.Second {
		t.Errorf("member timings %v %v %v, want 6s 4s 1s", m.LeaseDuration, m.RenewDeadline, m.RetryPeriod)
	}

	sel, _ := manifestSyncSelector(&operatorFlags{watchLabelSelector: "team=a"})
	got := (&sharding{id: "r1"}).selector(sel)
	if !got.Matches(labels.Set{"team": "a", shard.OwnerLabel: "r1"}) || got.Matches(labels.Set{"team": "a", shard.OwnerLabel: "r2"}) ||
		got.Matches(labels.Set{shard.OwnerLabel: "r1"}) {
		t.Errorf("selector %q: want team=a and the owner r1", got)
	}
	if (*sharding)(nil).selector(sel).String() != sel.String() {
		t.Error("without --shards auto the selector changed")
	}
}

// Two replicas of engine operator --shards auto share the ManifestSyncs:
// each syncs only those labelled with its ID, and when the second joins
// about half move to it, each after its old owner let go; when one stops
// (SIGTERM) it deletes its Lease and the other takes all at once. Over
// the whole run no ConfigMap and no ManifestSync status is written by
// both replicas by turns (from the API server's audit log).
func TestOperatorShards(t *testing.T) {
	env, audit, ns, names, args := shardedRun(t)
	ctx := context.Background()
	n := len(names)
	hookA, uiA := testenv.FreeAddr(t), testenv.FreeAddr(t)
	a := startEngineOperatorAs(t, env, "operator-a", append(args("a"), "--webhook-bind-address", hookA, "--ui-bind-address", uiA)...)
	for _, name := range names {
		configMapHas(t, env, ns, name, "one", 2*time.Minute)
	}
	owners := func() map[string]int {
		var list v1alpha1.ManifestSyncList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		c := map[string]int{}
		for _, ms := range list.Items {
			c[ms.Labels[shard.OwnerLabel]+ms.Labels[shard.DrainLabel]]++
		}
		return c
	}
	if o := owners(); o["a"] != n {
		t.Fatalf("one replica: owners %v, want all a", o)
	}

	b := startEngineOperatorAs(t, env, "operator-b", args("b")...)
	testenv.Eventually(t, 2*time.Minute, func() error {
		if o := owners(); o["a"]+o["b"] != n || o["a"] < n/4 || o["b"] < n/4 {
			return fmt.Errorf("owners %v, want both a and b, none draining", o)
		}
		return nil
	})
	for _, name := range names {
		setShardSync(t, env, ns, name, "two")
	}
	for _, name := range names {
		configMapHas(t, env, ns, name, "two", 2*time.Minute)
	}
	everyReplicaServesAll(t, env, ns, names, hookA, uiA)
	var leases coordinationv1.LeaseList
	if err := env.Client.List(ctx, &leases, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var leaseNames []string
	for _, l := range leases.Items {
		leaseNames = append(leaseNames, l.Name)
	}
	for _, want := range []string{"manifestsync-shard-a", "manifestsync-shard-b", "manifestsync.dev"} {
		if !slices.Contains(leaseNames, want) {
			t.Errorf("leases %v: no %s", leaseNames, want)
		}
	}

	// a stops: its Lease goes with it, and b takes all without waiting
	// for an expiry (15 s).
	a.stop(t)
	stopped := time.Now()
	testenv.Eventually(t, time.Minute, func() error {
		if o := owners(); o["b"] != n {
			return fmt.Errorf("owners %v, want all b", o)
		}
		return nil
	})
	if took := time.Since(stopped); took > 12*time.Second {
		t.Errorf("b took a's ManifestSyncs %s after a stopped, want well within the lease's 15s", took)
	}
	b.stop(t)

	noTwoWriters(t, audit, ns, n)
}

// everyReplicaServesAll checks that one replica's webhook receiver (at
// hook) and web UI (at ui) reach every ManifestSync of ns, the other
// replica's too, which its own cache does not hold: a webhook call for
// each is accepted and annotates it, and the UI's overview, as a service
// account that may read the ManifestSyncs of ns, lists each.
func everyReplicaServesAll(t *testing.T, env *testenv.Env, ns string, names []string, hook, ui string) {
	t.Helper()
	ctx := context.Background()
	const token = "webhook-shared-secret"
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"},
		Data: map[string][]byte{webhook.SecretKey: []byte(token)}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ms := &v1alpha1.ManifestSync{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
				return err
			}
			metav1.SetMetaDataAnnotation(&ms.ObjectMeta, webhook.SecretAnnotation, "hook")
			return env.Client.Update(ctx, ms)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(`{"ref": "refs/heads/main", "after": "0123456789abcdef0123456789abcdef01234567"}`)
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	for _, name := range names {
		testenv.Eventually(t, time.Minute, func() error { // until the receiver's cache shows the annotation
			req, err := http.NewRequest(http.MethodPost, "http://"+hook+webhook.PathPrefix+ns+"/"+name, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("X-GitHub-Event", "push")
			req.Header.Set("X-Hub-Signature-256", sig)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != http.StatusAccepted {
				return fmt.Errorf("webhook call for %s: %s, want 202", name, res.Status)
			}
			return nil
		})
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
			t.Fatal(err)
		}
		if ms.Annotations[webhook.RequestedAtAnnotation] == "" {
			t.Errorf("%s: the webhook call set no %s", name, webhook.RequestedAtAnnotation)
		}
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"manifestsyncs"}, Verbs: []string{"get", "list", "watch"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "viewer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "viewer"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "viewer", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		code, page := get(t, "http://"+ui+"/", "", map[string]string{"Authorization": "Bearer " + tok.Status.Token})
		if code != http.StatusOK {
			return fmt.Errorf("GET / of the UI: %d", code)
		}
		for _, name := range names {
			if !strings.Contains(page, "/ms/"+ns+"/"+name+`"`) {
				return fmt.Errorf("the UI's overview does not list %s", name)
			}
		}
		return nil
	})
}

// noTwoWriters fails t when a ConfigMap or a ManifestSync's status of ns
// was written by operator-a and operator-b by turns (the writer changes
// more than once), or when not both wrote, or fewer than n objects were
// written, or when two replicas wrote one object within one second: a
// dead replica's objects move only after its Lease expired, and one let
// go of (a drain, a stop) only after the sharder's handover gap (2 s).
func noTwoWriters(t *testing.T, audit, ns string, n int) {
	t.Helper()
	events, err := testenv.ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	type write struct {
		user string
		at   time.Time
	}
	writes := map[string][]write{}
	for _, ev := range events {
		user := ev.User.Username
		if (user != "operator-a" && user != "operator-b") || ev.ObjectRef.Namespace != ns || ev.ResponseStatus.Code >= 300 {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete":
		default:
			continue
		}
		// The ConfigMaps the syncs apply, and the status of each
		// ManifestSync; not the labels the sharder and the replicas
		// write to hand one over.
		if ev.ObjectRef.Resource == "configmaps" || ev.ObjectRef.Resource == "manifestsyncs" && ev.ObjectRef.Subresource == "status" {
			k := ev.ObjectRef.Resource + "/" + ev.ObjectRef.Name
			writes[k] = append(writes[k], write{user, ev.RequestReceivedTimestamp})
		}
	}
	by := map[string]bool{}
	for k, ws := range writes {
		slices.SortFunc(ws, func(x, y write) int { return x.at.Compare(y.at) })
		by[ws[0].user] = true
		switches := 0
		for i := 1; i < len(ws); i++ {
			by[ws[i].user] = true
			if ws[i].user == ws[i-1].user {
				continue
			}
			switches++
			if gap := ws[i].at.Sub(ws[i-1].at); gap < time.Second {
				t.Errorf("%s written by %s at %s and by %s at %s", k, ws[i-1].user, ws[i-1].at.Format(time.StampMilli), ws[i].user, ws[i].at.Format(time.StampMilli))
			}
		}
		// One move at most per object in these tests: writers that
		// alternate are two owners at once.
		if switches > 1 {
			t.Errorf("%s written by turns by both replicas (%d changes of writer): %v", k, switches, ws)
		}
	}
	if !by["operator-a"] || !by["operator-b"] || len(writes) < n {
		t.Errorf("writes of %d objects, by %v: want both replicas' of every ConfigMap", len(writes), by)
	}
}

// shardedRun is the set-up of the tests of two replicas: a control plane
// of their own whose audit log (the path returned) records every write,
// a namespace with 12 ManifestSyncs (names), and the flags of replica id.
func shardedRun(t *testing.T) (*testenv.Env, string, string, []string, func(id string) []string) {
	t.Helper()
	audit := filepath.Join(t.TempDir(), "audit.log")
	env := ownEnv(t, testenv.WithAuditLog(audit))
	ns := env.Namespace(t, nil)
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("sync-%d", i)
		if err := env.Client.Create(context.Background(), shardSync(ns, names[i], "one", nil)); err != nil {
			t.Fatal(err)
		}
	}
	args := func(id string) []string {
		return []string{"--shards", "auto", "--shard-id", id, "--leader-elect", "--leader-election-namespace", ns}
	}
	return env, audit, ns, names, args
}

// A replica killed (kill -9) keeps its ManifestSyncs until its Lease
// expires (15 s after its last renewal), and not a moment less; then the
// other takes them and syncs them within seconds. No object is written by
// both within one second.
func TestOperatorShardsKill(t *testing.T) {
	env, audit, ns, names, args := shardedRun(t)
	ctx := context.Background()
	n := len(names)
	a := startEngineOperatorAs(t, env, "operator-a", args("a")...)
	b := startEngineOperatorAs(t, env, "operator-b", args("b")...)
	ownedBy := map[string]string{}
	testenv.Eventually(t, 2*time.Minute, func() error {
		var list v1alpha1.ManifestSyncList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		c := map[string]int{}
		for _, ms := range list.Items {
			ownedBy[ms.Name] = ms.Labels[shard.OwnerLabel] + ms.Labels[shard.DrainLabel]
			c[ownedBy[ms.Name]]++
		}
		if c["a"]+c["b"] != n || c["a"] < n/4 || c["b"] < n/4 {
			return fmt.Errorf("owners %v, want both a and b, none draining", c)
		}
		return nil
	})
	for _, name := range names {
		configMapHas(t, env, ns, name, "one", 2*time.Minute)
	}
	b.kill(t)
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "manifestsync-shard-b"}, &l); err != nil {
		t.Fatal(err)
	}
	expiry := l.Spec.RenewTime.Add(15 * time.Second)
	for _, name := range names {
		setShardSync(t, env, ns, name, "two")
	}
	time.Sleep(time.Until(expiry.Add(-time.Second)))
	var list v1alpha1.ManifestSyncList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ms := range list.Items {
		if ownedBy[ms.Name] == "b" && ms.Labels[shard.OwnerLabel] != "b" {
			t.Errorf("%s left killed b (for %q) before its Lease expired", ms.Name, ms.Labels[shard.OwnerLabel])
		}
	}
	for _, name := range names {
		configMapHas(t, env, ns, name, "two", time.Minute)
	}
	if late := time.Since(expiry); late > 15*time.Second {
		t.Errorf("b's ManifestSyncs synced by a %s after b's Lease expired, want within 15s", late)
	}
	a.stop(t)
	noTwoWriters(t, audit, ns, n)
}

// setShardSync sets the value of shardSync's ConfigMap to v. The replicas
// write its status and the sharder its labels meanwhile: it reads again on
// a conflict.
func setShardSync(t *testing.T, env *testenv.Env, ns, name, v string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ms); err != nil {
			return err
		}
		ms.Spec.Params = shardSync(ns, name, v, nil).Spec.Params
		return env.Client.Update(context.Background(), ms)
	})
	if err != nil {
		t.Fatal(err)
	}
}
