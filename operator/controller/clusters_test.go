package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// remoteEnv is a second API server, the remote cluster of the tests that
// need one.
var remoteEnv *testenv.Env

// deletionTimeout is the operator's Options.DeletionTimeout in the tests.
const deletionTimeout = 2 * time.Second

// kubeconfigSecret creates, in ns, the Secret holding an administrator's
// kubeconfig of the remote cluster.
func kubeconfigSecret(t testing.TB, ns, name string) *corev1.Secret {
	t.Helper()
	kc, err := remoteEnv.Kubeconfig("admin-" + ns)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"value": kc}}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// stopRemote stops the remote cluster's API server until the test starts
// it again, or ends.
func stopRemote(t testing.TB) (start func()) {
	t.Helper()
	if err := remoteEnv.StopAPIServer(); err != nil {
		t.Fatalf("stopping the remote API server: %v", err)
	}
	stopped := true
	start = func() {
		t.Helper()
		if !stopped {
			return
		}
		stopped = false
		if err := remoteEnv.StartAPIServer(); err != nil {
			t.Fatalf("starting the remote API server again: %v", err)
		}
	}
	t.Cleanup(start)
	return start
}

func remoteConfigMap(ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := remoteEnv.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	return cm, err
}

// remoteTransform renders one ConfigMap per target from an object source
// and the target's params.
const remoteTransform = `
def main(ctx):
    src = ctx.sources["src"].object
    return [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"v": src["data"]["v"], "env": ctx.params["env"], "cluster": ctx.target.cluster},
    }]
`

// newRemoteSync makes a ManifestSync in home with a local target (in
// local) and a remote one (in remoteNS, through the Secret "remote"),
// reading the ConfigMap src of home.
func newRemoteSync(t testing.TB, home, local, remoteNS string) *v1alpha1.ManifestSync {
	t.Helper()
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "src"}, Data: map[string]string{"v": "1"}}
	if err := env.Client.Create(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	kubeconfigSecret(t, home, "remote")
	return newSync(home, "multi", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src"}}},
		Transform: inline(remoteTransform),
		Params:    params(`{"env": "base"}`),
		Targets: []v1alpha1.Target{
			{Name: "local", Namespace: local, Params: params(`{"env": "staging"}`)},
			{Name: "remote", Namespace: remoteNS, Params: params(`{"env": "prod"}`),
				Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "remote"}}},
		},
	})
}

func setSource(t testing.TB, ns, v string) {
	t.Helper()
	eventually(t, timeout, func() error {
		cm := mustConfigMap(t, ns, "src")
		cm.Data["v"] = v
		return env.Client.Update(context.Background(), cm)
	})
}

func remoteConfigMapWith(t testing.TB, within time.Duration, ms *v1alpha1.ManifestSync, ns, key, value string) {
	t.Helper()
	eventually(t, within, func() error {
		cm, err := remoteConfigMap(ns, "cfg")
		if err != nil {
			return err
		}
		if cm.Data[key] != value || cm.Labels[OwnerLabel] != reconciler.Options.owner(ms) {
			return fmt.Errorf("remote ConfigMap %s/cfg: data %v, labels %v", ns, cm.Data, cm.Labels)
		}
		return nil
	})
}

func row(ms *v1alpha1.ManifestSync, name string) v1alpha1.TargetStatus {
	for _, r := range ms.Status.Targets {
		if r.Name == name {
			return r
		}
	}
	return v1alpha1.TargetStatus{}
}

// One ManifestSync syncs to this cluster and a remote one; the remote
// API server stops: its target fails, the local one keeps following its
// source; it starts again: the remote target recovers on its own.
func TestRemoteClusterOutage(t *testing.T) {
	env.Need(t)
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)
	ms := newRemoteSync(t, home, local, remoteNS)
	createSync(t, ms)
	got := ready(t, ms)
	configMapWith(t, timeout, ms, local, "cfg", "env", "staging")
	remoteConfigMapWith(t, timeout, ms, remoteNS, "env", "prod")
	if cm, _ := remoteConfigMap(remoteNS, "cfg"); cm.Data["cluster"] != "remote" || cm.Data["v"] != "1" {
		t.Errorf("remote ConfigMap data = %v", cm.Data)
	}
	if r := row(got, "remote"); r.State != v1alpha1.TargetSynced || r.Cluster != "remote" || r.Namespace != remoteNS {
		t.Errorf("remote row = %+v", r)
	}
	want := v1alpha1.InventoryEntry{ID: remoteNS + "_cfg__ConfigMap", Version: "v1", Target: "remote", Cluster: "remote/value"}
	found := false
	for _, e := range entriesOf(t, got) {
		found = found || ownedEntry(e) == want
	}
	if !found {
		t.Errorf("status.inventory = %+v, want an entry %+v", entriesOf(t, got), want)
	}

	start := stopRemote(t)
	stopped := time.Now()
	setSource(t, home, "2")
	configMapWith(t, timeout, ms, local, "cfg", "v", "2")
	t.Logf("local target updated %v after the remote API server stopped", time.Since(stopped).Round(time.Millisecond))
	got = waitFor(t, ms, v1alpha1.ReasonApplyFailed)
	eventually(t, timeout, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		r := row(got, "remote")
		if r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `cluster "remote": unreachable`) {
			return fmt.Errorf("remote row = %+v", r)
		}
		if r := row(got, "local"); r.State != v1alpha1.TargetSynced {
			return fmt.Errorf("local row = %+v", r)
		}
		return nil
	})
	waitEvent(t, ms, EventSyncFailed, `cluster "remote": unreachable`)

	start()
	restarted := time.Now()
	eventually(t, timeout, func() error {
		cm, err := remoteConfigMap(remoteNS, "cfg")
		if err != nil {
			return err
		}
		if cm.Data["v"] != "2" {
			return fmt.Errorf("remote ConfigMap data = %v", cm.Data)
		}
		return nil
	})
	got = ready(t, ms)
	t.Logf("remote target recovered %v after its API server started", time.Since(restarted).Round(time.Millisecond))
	if r := row(got, "remote"); r.State != v1alpha1.TargetSynced || r.Message != "" {
		t.Errorf("remote row = %+v", r)
	}
}

// refusedKubeconfig is kubeconfig with a token the remote cluster refuses
// ("not-a-token") in place of its credentials.
func refusedKubeconfig(t testing.TB, kubeconfig []byte) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, "not-a-token"
	}
	bad, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

// A changed kubeconfig Secret rebuilds the cluster's client at once:
// credentials the remote cluster refuses fail the target as unauthorized,
// good ones make it sync again.
func TestRemoteKubeconfigChanges(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)
	ms := newRemoteSync(t, home, local, remoteNS)
	createSync(t, ms)
	ready(t, ms)

	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, keyOf(home, "remote"), secret); err != nil {
		t.Fatal(err)
	}
	good := secret.Data["value"]
	bad := refusedKubeconfig(t, good)
	secret.Data["value"] = bad
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	setSource(t, home, "2") // something to apply
	eventually(t, timeout, func() error {
		got := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		if r := row(got, "remote"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `cluster "remote": unauthorized`) {
			return fmt.Errorf("remote row = %+v", r)
		}
		return nil
	})
	configMapWith(t, timeout, ms, local, "cfg", "v", "2")

	secret.Data["value"] = []byte("not a kubeconfig")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error {
		got := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		if r := row(got, "remote"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `kubeconfig Secret "remote", key "value"`) {
			return fmt.Errorf("remote row = %+v", r)
		}
		return nil
	})

	secret.Data["value"] = good
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	remoteConfigMapWith(t, timeout, ms, remoteNS, "v", "2")
	ready(t, ms)
}

// Deleting a ManifestSync whose remote cluster is unreachable does not
// hang: after the deletion timeout the finalizer goes, and an event names
// what was left behind.
func TestDeletionTimeoutOnUnreachableCluster(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)
	ms := newRemoteSync(t, home, local, remoteNS)
	createSync(t, ms)
	ready(t, ms)
	remoteConfigMapWith(t, timeout, ms, remoteNS, "env", "prod")

	start := stopRemote(t)
	if err := env.Client.Delete(ctx, ms); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	eventually(t, deletionTimeout+timeout, func() error { return gone(&v1alpha1.ManifestSync{ObjectMeta: ms.ObjectMeta}) })
	took := time.Since(deleted)
	t.Logf("finalized %v after the deletion (timeout %v)", took.Round(time.Millisecond), deletionTimeout)
	if took < deletionTimeout-time.Second {
		t.Errorf("finalized after %v, before the deletion timeout", took)
	}
	waitEvent(t, ms, EventSyncFailed, fmt.Sprintf(`leaving behind 1 object: ConfigMap %s/cfg in cluster "remote"`, remoteNS))
	// The local copy was pruned.
	if _, err := getConfigMap(local, "cfg"); !apierrors.IsNotFound(err) {
		t.Errorf("local ConfigMap: %v, want NotFound", err)
	}
	// The remote copy is left as it was.
	start()
	eventually(t, timeout, func() error {
		_, err := remoteConfigMap(remoteNS, "cfg")
		return err
	})
}

func TestClusterFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{apierrors.NewNotFound(corev1.Resource("configmaps"), "x"), ""},
		{apierrors.NewForbidden(corev1.Resource("secrets"), "x", errors.New("no")), ""},
		{apierrors.NewUnauthorized("who"), "unauthorized"},
		{fmt.Errorf("applying: %w", apierrors.NewUnauthorized("who")), "unauthorized"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "unreachable"},
		{context.Canceled, ""},
	} {
		if got := clusterFailure(c.err); got != c.want {
			t.Errorf("clusterFailure(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
