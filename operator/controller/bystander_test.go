package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// kindScript outputs one object of the kind, apiVersion and name of
// params, with the fields of params' body.
const kindScript = `
def main(ctx):
    obj = {"apiVersion": ctx.params["apiVersion"], "kind": ctx.params["kind"], "metadata": {"name": ctx.params["name"]}}
    obj.update(ctx.params.get("body", {}))
    return [obj]
`

// peerKubeconfig is a kubeconfig of the server at url (a blackhole:
// gittest.Blackhole accepts connections and never answers, not even the
// TLS handshake), whose certificate
// it does not check, with a token.
func peerKubeconfig(url string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: peer, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: peer, user: {token: not-a-secret}}]
contexts: [{name: peer, context: {cluster: peer, user: peer}}]
current-context: peer
`, url)
}

// restrictedOperator runs, until the test ends, an operator against the
// second API server (where no other operator runs) as a user that may do
// only what rules grant (and what every authenticated user may). It
// returns a client of that API server as its administrator, and the
// operator's reconciler.
func restrictedOperator(t *testing.T, rules []rbacv1.PolicyRule) (client.Client, *Reconciler) {
	t.Helper()
	ctx := context.Background()
	admin := remoteEnv.Client
	user := "operator-" + rand.String(6)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), obj) })
	}
	cfg := rest.CopyConfig(remoteEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	mctx, cancel := context.WithCancel(ctx)
	mgr, r, err := newOperator(mctx, &testenv.Env{Config: cfg, Scheme: remoteEnv.Scheme})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stop, err := testenv.StartManager(mctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return admin, r
}

// operatorRules are what the restricted operator may do: its own
// ManifestSyncs, namespaces, kubeconfig Secrets, events, ConfigMaps; and
// PodTemplates, which it may read and write one by one but not list or
// watch. LimitRanges it may not touch at all.
var operatorRules = []rbacv1.PolicyRule{
	{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces", "secrets"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	{APIGroups: []string{""}, Resources: []string{"podtemplates"}, Verbs: []string{"get", "create", "patch", "update", "delete"}},
}

// Bystander isolation: four ManifestSyncs whose outputs are of kinds the
// operator may not list (two PodTemplates, which it may read and write
// one by one; two LimitRanges, which it may not touch), and four whose
// remote clusters accept connections and never answer, do not delay the
// others: a fresh ManifestSync is Ready within 5 s, created at once with
// them and once they all failed. Before, a kind the operator may not list
// held a worker forever (the cached read waited for a watch that never
// syncs) and a blackholed cluster held one for minutes: four of either
// stopped every other ManifestSync of an operator with four workers.
//
// What a hostile tenant gets: its own ManifestSync fails, naming the
// cause (the API server's 403, or "unreachable (retrying)"); nobody
// else's is slowed.
func TestBystanderIsolation(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	admin, r := restrictedOperator(t, operatorRules)
	ns := remoteEnv.Namespace(t, nil)
	create := func(ms *v1alpha1.ManifestSync) {
		t.Helper()
		if err := admin.Create(ctx, ms); err != nil {
			t.Fatal(err)
		}
		// Finalized before the operator stops: no other operator of the
		// second API server finds it later.
		t.Cleanup(func() {
			_ = admin.Delete(context.Background(), ms)
			eventually(t, timeout, func() error { return remoteEnv.Gone(ms) })
		})
	}
	kind := func(name, apiVersion, kind, body string) *v1alpha1.ManifestSync {
		return newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Transform: inline(kindScript),
			Params:    params(fmt.Sprintf(`{"apiVersion": %q, "kind": %q, "name": %q, "body": %s}`, apiVersion, kind, name, body)),
			Targets:   targets(ns),
		})
	}
	podTemplate := `{"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}`
	limitRange := `{"spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}`
	var stuck []*v1alpha1.ManifestSync
	for i := range 2 {
		stuck = append(stuck, kind(fmt.Sprintf("podtemplate-%d", i), "v1", "PodTemplate", podTemplate),
			kind(fmt.Sprintf("limitrange-%d", i), "v1", "LimitRange", limitRange))
	}
	for i := range 4 {
		name := fmt.Sprintf("blackhole-%d", i)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string][]byte{"value": peerKubeconfig(fmt.Sprintf("https://127.0.0.1:%d", gittest.Blackhole(t)))}}
		if err := admin.Create(ctx, secret); err != nil {
			t.Fatal(err)
		}
		stuck = append(stuck, newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Transform: inline(namesScript),
			Params:    params(`{"names": ["a", "b", "c"]}`),
			Targets: []v1alpha1.Target{{Name: "far", Namespace: "default",
				Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: name}}}},
		}))
	}
	// And one whose object source is of a kind the operator may not list
	// (its cached read of the source waited forever too).
	stuck = append(stuck, newSync(ns, "source-limitrange", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "lr", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "LimitRange", Name: "limitrange-0"}}},
		Transform: inline(namesScript), Params: params(`{"names": ["from-source"]}`), Targets: targets(ns),
	}))
	for _, ms := range stuck {
		create(ms)
	}
	fresh := func(name string) time.Duration {
		t.Helper()
		ms := newSync(ns, name, v1alpha1.ManifestSyncSpec{
			Transform: inline(namesScript), Params: params(fmt.Sprintf(`{"names": [%q]}`, name)), Targets: targets(ns),
		})
		start := time.Now()
		create(ms)
		remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, timeout)
		took := time.Since(start)
		if took > 5*time.Second {
			t.Errorf("%s: Ready %v after it was created, beside the stuck ones; want within 5s", name, took.Round(time.Millisecond))
		}
		return took
	}
	first := fresh("fresh-at-once")

	// Every stuck one reports its cause, well within its timeout.
	reported := time.Now()
	for _, ms := range stuck {
		want, reason := "unreachable (retrying)", v1alpha1.ReasonApplyFailed
		switch {
		case strings.HasPrefix(ms.Name, "podtemplate"):
			want, reason = "", v1alpha1.ReasonSynced // read one by one, its drift found at resync
		case strings.HasPrefix(ms.Name, "limitrange"):
			want = `cannot get resource "limitranges"` // the API server's own 403
		case ms.Name == "source-limitrange":
			want, reason = `cannot get resource "limitranges"`, v1alpha1.ReasonSourceFailed
		}
		got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), reason, 20*time.Second)
		msg := condition(got, v1alpha1.ConditionReady).Message
		for _, r := range got.Status.Targets {
			msg += " | " + r.Message
		}
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %s, %q; want it to say %q", ms.Name, reason, msg, want)
		}
	}
	t.Logf("the stuck ones reported within %v", time.Since(reported).Round(time.Millisecond))
	second := fresh("fresh-after")
	t.Logf("a fresh ManifestSync was Ready %v after it was created with 8 stuck ones, %v once they had failed",
		first.Round(time.Millisecond), second.Round(time.Millisecond))

	// The PodTemplate is there, applied without a watch of its kind.
	pt := &corev1.PodTemplate{}
	if err := admin.Get(ctx, keyOf(ns, "podtemplate-0"), pt); err != nil {
		t.Errorf("the PodTemplate: %v", err)
	}
	// Nobody watches what the operator may not: no informer of the kind
	// was started, so nothing retries a list forever.
	for _, kind := range []string{"PodTemplate", "LimitRange"} {
		gvk := corev1.SchemeGroupVersion.WithKind(kind)
		if _, watched := r.watches.watching(watchKey{gvk: gvk, purpose: watchManaged}); watched {
			t.Errorf("the operator watches %ss, which it may not list", kind)
		}
		if _, watched := r.watches.watchingIn(gvk, ns); watched {
			t.Errorf("the operator watches %ss of namespace %s, which it may not list", kind, ns)
		}
	}
}
