package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/shard"
)

// engine status --shards against Leases and labelled ManifestSyncs the
// test writes: a live replica that holds the leader Lease, one whose Lease
// expired, a Lease held under another ID, an owner with no Lease at all;
// owned, draining and unowned ManifestSyncs, -n and
// --watch-label-selector; the table and -o json. A user who may only list
// Leases and ManifestSyncs sees the same; one who may not list Leases, or
// ManifestSyncs, is told which permission is missing, and sees nothing.
func TestStatusShards(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	opNS, msNS, other := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)

	now := time.Now()
	lease := func(name, holder string, renewed time.Time) *coordinationv1.Lease {
		secs := int32(15)
		t := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t}}
	}
	for _, l := range []*coordinationv1.Lease{
		lease(shard.LeaseName("st-a"), "st-a", now),
		lease(shard.LeaseName("st-b"), "st-b", now.Add(-time.Minute)),
		lease(shard.LeaseName("st-c"), "someone-else", now),
		lease("manifestsync.dev", "st-a", now),
		lease("unrelated", "st-z", now),
	} {
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	owned := func(ns, name, owner, drain string, extra map[string]string) {
		t.Helper()
		l := map[string]string{}
		if owner != "" {
			l[shard.OwnerLabel] = owner
		}
		if drain != "" {
			l[shard.DrainLabel] = drain
		}
		for k, v := range extra {
			l[k] = v
		}
		ms := shardSync(ns, name, "v", l)
		ms.Spec.Suspend = true // the test's cluster runs a reconciler
		if err := env.Client.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	owned(msNS, "a1", "st-a", "", map[string]string{"team": "x"})
	owned(msNS, "a2", "st-a", "", nil)
	owned(msNS, "a3", "st-a", "st-b", nil)
	owned(msNS, "b1", "st-b", "", nil)
	owned(msNS, "b2", "st-b", "", nil)
	owned(msNS, "d1", "st-d", "", nil)
	owned(msNS, "u1", "", "", nil)
	owned(msNS, "u2", "", "", map[string]string{"team": "x"})
	owned(other, "a4", "st-a", "", nil)

	// kubectl get manifestsyncs -o wide names each one's replica (a
	// column of priority 1 of the table the API server makes).
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/manifestsync.dev/v1alpha1/namespaces", msNS, "manifestsyncs").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	replicas := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if c.Name != "Replica" || c.Priority != 1 {
			continue
		}
		for _, r := range table.Rows {
			var meta metav1.PartialObjectMetadata
			if err := json.Unmarshal(r.Object.Raw, &meta); err != nil {
				t.Fatal(err)
			}
			if r.Cells[i] != nil { // kubectl shows <none>
				replicas[meta.Name] = fmt.Sprint(r.Cells[i])
			}
		}
	}
	if _, ok := replicas["u1"]; replicas["a1"] != "st-a" || replicas["b1"] != "st-b" || ok {
		t.Errorf("the Replica column reads %v, want a1 st-a, b1 st-b, u1 none", replicas)
	}

	base := []string{"status", "--shards", "--operator-namespace", opNS}
	status := func(kubeconfig string, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		args = append(append(append([]string{}, base...), args...), "--kubeconfig", kubeconfig, "--context", "envtest")
		code := run(args, &out, &errb)
		t.Logf("engine %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return code, out.String(), errb.String()
	}
	parse := func(stdout string) ShardStatus {
		t.Helper()
		var st ShardStatus
		if err := json.Unmarshal([]byte(stdout), &st); err != nil {
			t.Fatalf("-o json: %v", err)
		}
		return st
	}
	type row struct {
		state           string
		owned, draining int
		sharder         bool
	}
	rows := func(st ShardStatus) map[string]row {
		m := map[string]row{}
		for _, r := range st.Replicas {
			m[r.ID] = row{r.State, r.Owned, r.Draining, r.Sharder}
		}
		return m
	}
	check := func(what string, st ShardStatus, want map[string]row, unowned int, sharder string) {
		t.Helper()
		got := rows(st)
		if len(got) != len(want) {
			t.Errorf("%s: replicas %v, want %v", what, got, want)
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("%s: replica %s is %+v, want %+v", what, id, got[id], w)
			}
		}
		if st.Unowned != unowned || st.Sharder != sharder || st.Clock != "server" || st.Namespace != opNS {
			t.Errorf("%s: unowned %d, sharder %q, clock %q, namespace %q; want %d, %q, server, %s",
				what, st.Unowned, st.Sharder, st.Clock, st.Namespace, unowned, sharder, opNS)
		}
		if d := time.Since(st.Now); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("%s: judged at %s, not about now", what, st.Now)
		}
	}
	inNS := map[string]row{
		"st-a": {shardLive, 3, 1, true},
		"st-b": {shardExpired, 2, 0, false},
		"st-c": {shardNotOwner, 0, 0, false},
		"st-d": {shardNoLease, 1, 0, false},
	}

	code, stdout, stderr := status(cluster.kubeconfig, "-n", msNS, "-o", "json")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	st := parse(stdout)
	check("-n", st, inNS, 2, "st-a")
	for _, r := range st.Replicas {
		if r.ID == "st-b" && (r.RenewedAgo < 55 || r.RenewedAgo > 65 || r.LeaseDurationSeconds != 15 || r.Holder != "st-b") {
			t.Errorf("st-b renewed %vs ago, lease %ds, holder %q; want about 60s, 15s, st-b", r.RenewedAgo, r.LeaseDurationSeconds, r.Holder)
		}
	}

	// Read two objects a page, it counts the same.
	shardPage = 2
	_, stdout, _ = status(cluster.kubeconfig, "-n", msNS, "-o", "json")
	shardPage = 500
	check("pages of 2", parse(stdout), inNS, 2, "st-a")

	// The table says the same.
	code, stdout, _ = status(cluster.kubeconfig, "-n", msNS)
	lines := strings.Split(stdout, "\n")
	if code != 0 || len(lines) < 5 || strings.Join(strings.Fields(lines[0]), " ") != "REPLICA HOLDER RENEWED STATE OWNED DRAINING SHARDER" {
		t.Fatalf("exit %d, table:\n%s", code, stdout)
	}
	wantRows := map[string]string{
		"st-a": "st-a st-a AGO live 3 1 yes",
		"st-b": "st-b st-b AGO expired 2 0",
		"st-c": "st-c someone-else AGO not its holder 0 0",
		"st-d": "st-d - - no lease 1 0",
	}
	ago := func(s string) string {
		f := strings.Fields(s)
		for i := 0; i+1 < len(f); i++ {
			if f[i+1] == "ago" {
				f = append(append(f[:i:i], "AGO"), f[i+2:]...)
				break
			}
		}
		return strings.Join(f, " ")
	}
	for _, l := range lines[1:5] {
		f := strings.Fields(l)
		if len(f) == 0 || ago(l) != wantRows[f[0]] {
			t.Errorf("table row %q, want %q", l, wantRows[f[0]])
		}
	}
	for _, want := range []string{"Unowned: 2 ManifestSyncs of namespace " + msNS + ".",
		"Sharder: st-a, holder of the Lease " + opNS + "/manifestsync.dev.", "the API server's clock;"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table does not say %q:\n%s", want, stdout)
		}
	}

	// Every namespace: a4 counts too.
	_, stdout, _ = status(cluster.kubeconfig, "-o", "json")
	if r := rows(parse(stdout))["st-a"]; r.owned != 4 {
		t.Errorf("every namespace: st-a owns %d, want 4", r.owned)
	}
	// An operator of a selector: its own leader Lease (none here), and
	// only its ManifestSyncs.
	_, stdout, _ = status(cluster.kubeconfig, "-n", msNS, "--watch-label-selector", "team=x", "-o", "json")
	st = parse(stdout)
	check("selector", st, map[string]row{
		"st-a": {shardLive, 1, 0, false},
		"st-b": {shardExpired, 0, 0, false},
		"st-c": {shardNotOwner, 0, 0, false},
	}, 1, "")
	if sel, _ := labels.Parse("team=x"); st.LeaderLease != leaderElectionID(sel) || st.LeaderLease == "manifestsync.dev" {
		t.Errorf("selector: leader Lease %q, want the selector's own", st.LeaderLease)
	}
	if code, _, stderr := status(cluster.kubeconfig, "web"); code != exitUsage || !strings.Contains(stderr, "no NAME") {
		t.Errorf("--shards NAME: exit %d, stderr %q", code, stderr)
	}

	// Users with read access only: to both, to ManifestSyncs alone, to
	// Leases alone.
	readLeases := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list"}}
	readSyncs := rbacv1.PolicyRule{APIGroups: []string{"manifestsync.dev"}, Resources: []string{"manifestsyncs"}, Verbs: []string{"get", "list"}}
	grant := func(user string, leases, syncs bool) string {
		t.Helper()
		var objs []client.Object
		subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		if leases {
			objs = append(objs,
				&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: user}, Rules: []rbacv1.PolicyRule{readLeases}},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: opNS, Name: user}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}})
		}
		if syncs {
			objs = append(objs,
				&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: msNS, Name: user}, Rules: []rbacv1.PolicyRule{readSyncs}},
				&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: msNS, Name: user}, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}})
		}
		for _, o := range objs {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
		kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData,
			Token: env.Config.BearerToken, Impersonate: user}
		kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: user}
		kc.CurrentContext = "envtest"
		path := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	reader := grant("shard-reader", true, true)
	// RBAC takes effect when the API server's authorizer has seen it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, stdout, stderr = status(reader, "-n", msNS, "-o", "json")
		if code == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("a reader of Leases and ManifestSyncs: exit %d, stderr %q", code, stderr)
	}
	check("reader", parse(stdout), inNS, 2, "st-a")

	for _, c := range []struct {
		user          string
		leases, syncs bool
		want          string
	}{
		{"no-leases", false, true, "needs permission to list leases.coordination.k8s.io in namespace " + opNS},
		{"no-syncs", true, false, "needs permission to list manifestsyncs.manifestsync.dev in namespace " + msNS},
	} {
		kc := grant(c.user, c.leases, c.syncs)
		// Until the authorizer has seen the grant, the refusal may be of
		// the other list.
		var code int
		var stdout, stderr string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			code, stdout, stderr = status(kc, "-n", msNS)
			if strings.Contains(stderr, c.want) || time.Now().After(deadline) {
				break
			}
		}
		if code != exitUsage || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d, nothing shown, and %q", c.user, code, stdout, stderr, exitUsage, c.want)
		}
	}
}

// The output docs/sharding.md shows is what engine status --shards
// writes for the replicas it describes.
func TestStatusShardsDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sharding.md")
	if err != nil {
		t.Fatal(err)
	}
	const cmd = "$ engine status --shards\n"
	_, block, ok := strings.Cut(string(doc), "```console\n"+cmd)
	if !ok {
		t.Fatalf("docs/sharding.md has no console block of %q", cmd)
	}
	block, _, _ = strings.Cut(block, "```")
	renew := func(ago float64) *time.Time {
		t := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC).Add(-time.Duration(ago * float64(time.Second)))
		return &t
	}
	st := &ShardStatus{Namespace: "manifestsync-system", LeaderLease: "manifestsync.dev", Sharder: "manifestsync-7c9d5b6f4-2kxqp",
		Now: time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC), Clock: "server", Unowned: 0,
		Replicas: []ShardReplica{
			{ID: "manifestsync-7c9d5b6f4-2kxqp", Holder: "manifestsync-7c9d5b6f4-2kxqp", RenewTime: renew(1.2), RenewedAgo: 1.2,
				LeaseDurationSeconds: 15, State: shardLive, Owned: 334, Sharder: true},
			{ID: "manifestsync-7c9d5b6f4-8wz4m", Holder: "manifestsync-7c9d5b6f4-8wz4m", RenewTime: renew(0.4), RenewedAgo: 0.4,
				LeaseDurationSeconds: 15, State: shardLive, Owned: 329, Draining: 2},
			{ID: "manifestsync-7c9d5b6f4-q5v7n", Holder: "manifestsync-7c9d5b6f4-q5v7n", RenewTime: renew(16.1), RenewedAgo: 16.1,
				LeaseDurationSeconds: 15, State: shardExpired, Owned: 337},
		}}
	var out bytes.Buffer
	if err := writeShards(&out, st); err != nil {
		t.Fatal(err)
	}
	if block != out.String() {
		t.Errorf("docs/sharding.md shows\n%s\nengine status --shards writes\n%s", block, out.String())
	}
}
