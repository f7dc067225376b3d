package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// primary is the remote cluster of the sources of these tests, through
// the kubeconfig Secret "primary".
var primary = &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "primary"}}

// remoteSourceTransform renders the ConfigMap "out" from the object
// source "one" and the names in the object set "set" (none without it).
const remoteSourceTransform = `
def main(ctx):
    names = []
    if "set" in ctx.sources:
        names = [o["metadata"]["name"] for o in ctx.sources["set"].objects]
    return [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "out"},
        "data": {"v": ctx.sources["one"].object["data"]["v"], "names": ",".join(names)},
    }]
`

// createRemote creates obj in the remote cluster.
func createRemote(t testing.TB, obj client.Object) {
	t.Helper()
	if err := remoteEnv.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// setRemote sets data.v of the remote ConfigMap ns/name.
func setRemote(t testing.TB, ns, name, v string) {
	t.Helper()
	eventually(t, timeout, func() error {
		cm, err := remoteConfigMap(ns, name)
		if err != nil {
			return err
		}
		cm.Data["v"] = v
		return remoteEnv.Client.Update(context.Background(), cm)
	})
}

func remoteCM(ns, name string, labels map[string]string, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"v": v}}
}

// An object source and an object set source read from a remote cluster:
// its kubeconfig's credentials authorise the reads (the remote namespace
// shares nothing with the ManifestSync's), a change there is applied
// within 2 s, and an object of the same name in this cluster is not read.
func TestRemoteSources(t *testing.T) {
	env.Need(t)
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	rns := remoteEnv.Namespace(t, nil)
	shop := map[string]string{"app": "shop"}
	createRemote(t, remoteCM(rns, "src", nil, "1"))
	createRemote(t, remoteCM(rns, "a", shop, "a"))
	createRemote(t, remoteCM(rns, "b", shop, "b"))
	createRemote(t, remoteCM(rns, "other", nil, "x"))
	kubeconfigSecret(t, home, "primary")
	ms := newSync(home, "remote-sources", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "one", Cluster: primary, Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns, Name: "src"}},
			{Name: "set", Cluster: primary, Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns,
				LabelSelector: &metav1.LabelSelector{MatchLabels: shop}}},
		},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(local),
	})
	createSync(t, ms)
	ready(t, ms)
	configMapWith(t, timeout, ms, local, "out", "v", "1")
	configMapWith(t, timeout, ms, local, "out", "names", "a,b")

	changed := time.Now()
	setRemote(t, rns, "src", "2")
	configMapWith(t, 2*time.Second, ms, local, "out", "v", "2")
	t.Logf("object source: a change in the remote cluster applied %v later", time.Since(changed).Round(time.Millisecond))

	changed = time.Now()
	createRemote(t, remoteCM(rns, "c", shop, "c"))
	configMapWith(t, 2*time.Second, ms, local, "out", "names", "a,b,c")
	t.Logf("object set: an object labelled in the remote cluster applied %v later", time.Since(changed).Round(time.Millisecond))

	// The same names in this cluster are not what the sources read.
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rns}})
	})
	if err := env.Client.Create(context.Background(), remoteCM(rns, "src", nil, "local")); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), remoteCM(rns, "d", shop, "d")); err != nil {
		t.Fatal(err)
	}
	setRemote(t, rns, "src", "3")
	configMapWith(t, timeout, ms, local, "out", "v", "3")
	configMapWith(t, timeout, ms, local, "out", "names", "a,b,c")
}

// sourceFailed waits until ms's Ready condition is SourceFailed with a
// message containing text, and returns it.
func sourceFailed(t testing.TB, ms *v1alpha1.ManifestSync, text string) *v1alpha1.ManifestSync {
	t.Helper()
	got := &v1alpha1.ManifestSync{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonSourceFailed || !strings.Contains(c.Message, text) {
			return fmt.Errorf("Ready = %+v, want %s with %q", c, v1alpha1.ReasonSourceFailed, text)
		}
		return nil
	})
	return got
}

// The remote cluster's API server stops: only the ManifestSync that
// reads it fails (SourceFailed), its applied objects stay, and one that
// reads this cluster goes on following its source; the API server comes
// back: the first syncs again, and its watch is back (a change there is
// applied; the probe sees the API server within a second).
func TestRemoteSourceOutage(t *testing.T) {
	env.Need(t)
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	rns := remoteEnv.Namespace(t, nil)
	createRemote(t, remoteCM(rns, "src", nil, "1"))
	kubeconfigSecret(t, home, "primary")
	reads := newSync(home, "reads-remote", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "one", Cluster: primary, Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns, Name: "src"}}},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(local),
	})
	other := env.Namespace(t, nil)
	if err := env.Client.Create(context.Background(), remoteCM(home, "src", nil, "1")); err != nil {
		t.Fatal(err)
	}
	readsLocal := newSync(home, "reads-local", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "one", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src"}}},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(other),
	})
	createSync(t, reads)
	createSync(t, readsLocal)
	ready(t, reads)
	ready(t, readsLocal)
	configMapWith(t, timeout, reads, local, "out", "v", "1")

	start := stopRemote(t)
	stopped := time.Now()
	got := sourceFailed(t, reads, `source "one": cluster "primary": unreachable`)
	t.Logf("SourceFailed %v after the remote API server stopped: %s", time.Since(stopped).Round(time.Millisecond), condition(got, v1alpha1.ConditionReady).Message)
	setSource(t, home, "2")
	configMapWith(t, timeout, readsLocal, other, "out", "v", "2")
	if c := condition(ready(t, readsLocal), v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonSynced {
		t.Errorf("the ManifestSync reading this cluster: Ready = %+v", c)
	}
	// What was applied stays.
	if cm := mustConfigMap(t, local, "out"); cm.Data["v"] != "1" {
		t.Errorf("ConfigMap %s/out: data %v, want v=1 kept", local, cm.Data)
	}
	// The operator's own API server is up.
	if up := testutil.ToFloat64(apiServerReachable); up != 1 {
		t.Errorf("manifestsync_apiserver_reachable = %v during the remote cluster's outage, want 1", up)
	}

	start()
	restarted := time.Now()
	ready(t, reads)
	t.Logf("synced again %v after the remote API server started", time.Since(restarted).Round(time.Millisecond))
	changed := time.Now()
	setRemote(t, rns, "src", "3")
	configMapWith(t, timeout, reads, local, "out", "v", "3")
	t.Logf("after the outage, a change in the remote cluster applied %v later", time.Since(changed).Round(time.Millisecond))
}

// remoteWatchesOf are the operator's watches of the cluster of ref, if
// any.
func remoteWatchesOf(ref kubeConfigRef) *remoteSources {
	reconciler.remotes.mu.Lock()
	rc := reconciler.remotes.clients[ref]
	reconciler.remotes.mu.Unlock()
	if rc == nil {
		return nil
	}
	rc.mu.Lock() // not under remotes.mu: sourcesOf takes them the other way round
	defer rc.mu.Unlock()
	return rc.sources
}

// The watches of a remote cluster no ManifestSync reads any more stop
// (its probe too); the next reader starts them again.
func TestRemoteWatchesStopWhenUnused(t *testing.T) {
	env.Need(t)
	rs := reconciler.remotes
	rs.mu.Lock()
	idle := rs.idleCheck
	rs.idleCheck = 200 * time.Millisecond
	rs.mu.Unlock()
	t.Cleanup(func() {
		rs.mu.Lock()
		rs.idleCheck = idle
		rs.mu.Unlock()
	})
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	rns := remoteEnv.Namespace(t, nil)
	createRemote(t, remoteCM(rns, "src", nil, "1"))
	kubeconfigSecret(t, home, "primary")
	spec := v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "one", Cluster: primary, Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns, Name: "src"}}},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(local),
	}
	first := newSync(home, "first", spec)
	createSync(t, first)
	ready(t, first)
	ref := kubeConfigRef{namespace: home, name: "primary", key: "value"}
	before := remoteWatchesOf(ref)
	if before == nil {
		t.Fatal("no watches of the remote cluster")
	}
	if err := env.Client.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, func() error { return gone(first) })
	eventually(t, timeout, func() error {
		if w := remoteWatchesOf(ref); w != nil || before.ctx.Err() == nil {
			return fmt.Errorf("the watches of the remote cluster run with no reader: %p, stopped: %v", w, before.ctx.Err())
		}
		return nil
	})

	second := newSync(home, "second", spec)
	createSync(t, second)
	ready(t, second)
	setRemote(t, rns, "src", "2")
	configMapWith(t, 2*time.Second, second, local, "out", "v", "2")
	if w := remoteWatchesOf(ref); w == nil || w == before {
		t.Errorf("watches after a new reader: %p, the stopped ones %p", w, before)
	}
}

// execKubeconfig is a kubeconfig of the remote cluster whose credentials
// come from an exec plugin: a script printing an ExecCredential with the
// client certificate of a user the remote cluster knows. It returns the
// script's path too.
func execKubeconfig(t testing.TB) (kubeconfig []byte, command string) {
	t.Helper()
	kc, err := remoteEnv.Kubeconfig("exec-" + rand.String(6))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range cfg.AuthInfos {
		cred, err := json.Marshal(map[string]any{
			"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
			"status": map[string]any{"clientCertificateData": string(u.ClientCertificateData), "clientKeyData": string(u.ClientKeyData)},
		})
		if err != nil {
			t.Fatal(err)
		}
		command = filepath.Join(t.TempDir(), "credential.sh")
		if err := os.WriteFile(command, []byte("#!/bin/sh\ncat <<'END'\n"+string(cred)+"\nEND\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: command, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		}}
	}
	if kubeconfig, err = clientcmd.Write(*cfg); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, command
}

// A kubeconfig with an exec credential plugin is refused, naming the
// Secret and why, unless the operator runs with --allow-kubeconfig-exec:
// then the plugin runs and its credentials reach the remote cluster.
func TestKubeconfigExec(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	kc, command := execKubeconfig(t)

	// The operator of the tests runs without the flag.
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	rns := remoteEnv.Namespace(t, nil)
	createRemote(t, remoteCM(rns, "src", nil, "1"))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "primary"}, Data: map[string][]byte{"value": kc}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "exec", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "one", Cluster: primary, Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns, Name: "src"}}},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(local),
	})
	createSync(t, ms)
	got := sourceFailed(t, ms, `source "one": cluster "primary": kubeconfig Secret "primary", key "value": the kubeconfig gets its credentials from a plugin`)
	msg := condition(got, v1alpha1.ConditionReady).Message
	for _, want := range []string{"would run a command the Secret names", "--allow-kubeconfig-exec"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, command) {
		t.Errorf("message %q names the Secret's command", msg)
	}

	// With the flag, the same kubeconfig reads the remote cluster.
	rs := &remotes{scheme: env.Scheme, timeout: 5 * time.Second, allowExec: true}
	rc, err := rs.build(kubeConfigRef{name: "exec"}, kc)
	if err != nil {
		t.Fatalf("with --allow-kubeconfig-exec: %v", err)
	}
	cm := &corev1.ConfigMap{}
	if err := rc.client.Get(ctx, client.ObjectKey{Namespace: rns, Name: "src"}, cm); err != nil || cm.Data["v"] != "1" {
		t.Errorf("reading the remote ConfigMap with the plugin's credentials: %v, data %v", err, cm.Data)
	}
	rs.allowExec = false
	if _, err := rs.build(kubeConfigRef{name: "exec"}, kc); !errors.Is(err, errKubeconfigExec) {
		t.Errorf("without --allow-kubeconfig-exec: %v, want %v", err, errKubeconfigExec)
	}
}

// A changed kubeconfig Secret replaces the remote cluster's source
// watches: the old ones stop; credentials the cluster refuses fail the
// source; good ones again read it, watched (a change is applied within
// 2 s). No error shows the Secret's data.
func TestRemoteSourceKubeconfigChanges(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	rns := remoteEnv.Namespace(t, nil)
	createRemote(t, remoteCM(rns, "src", nil, "1"))
	secret := kubeconfigSecret(t, home, "primary")
	ms := newSync(home, "rotates", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "one", Cluster: primary, Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: rns, Name: "src"}}},
		Transform: inline(remoteSourceTransform),
		Targets:   targets(local),
	})
	createSync(t, ms)
	configMapWith(t, timeout, ms, local, "out", "v", "1")
	ref := kubeConfigRef{namespace: home, name: "primary", key: "value"}
	watching := func() *remoteSources { return remoteWatchesOf(ref) }
	before := watching()
	if before == nil {
		t.Fatal("no source watches of the remote cluster")
	}

	good := secret.Data["value"]
	bad := refusedKubeconfig(t, good)
	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		secret.Data["value"] = bad
		return env.Client.Update(ctx, secret)
	})
	got := sourceFailed(t, ms, `source "one": cluster "primary": unauthorized`)
	if before.ctx.Err() == nil {
		t.Error("the source watches of the replaced kubeconfig still run")
	}
	msg := condition(got, v1alpha1.ConditionReady).Message
	t.Logf("with credentials the cluster refuses: %s", msg)
	if strings.Contains(msg, "not-a-token") {
		t.Errorf("message %q shows the Secret's token", msg)
	}

	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		secret.Data["value"] = good
		return env.Client.Update(ctx, secret)
	})
	ready(t, ms)
	if after := watching(); after == nil || after == before {
		t.Errorf("source watches after the change: %p, before %p", after, before)
	}
	changed := time.Now()
	setRemote(t, rns, "src", "2")
	configMapWith(t, 2*time.Second, ms, local, "out", "v", "2")
	t.Logf("with the kubeconfig restored, a change in the remote cluster applied %v later", time.Since(changed).Round(time.Millisecond))
	if strings.Contains(operatorLogs.String(), "not-a-token") {
		t.Error("the operator logged the Secret's token")
	}
}

// setRemoteLabels sets the labels of the remote namespace ns.
func setRemoteLabels(t testing.TB, ns string, labels map[string]string) {
	t.Helper()
	eventually(t, timeout, func() error {
		cur := &corev1.Namespace{}
		if err := remoteEnv.Client.Get(context.Background(), client.ObjectKey{Name: ns}, cur); err != nil {
			return err
		}
		cur.Labels = labels
		return remoteEnv.Client.Update(context.Background(), cur)
	})
}

// A remote target's namespaceSelector picks among the remote cluster's
// namespaces, not this cluster's: a namespace labelled there is synced
// (the remote namespaces are watched), one unlabelled is pruned. The
// remote cluster down, its target fails in the namespaces it had, and
// the local target goes on. The transform runs in an evaluation worker,
// as under engine operator: the remote namespaces cross to it.
func TestRemoteTargetNamespaceSelector(t *testing.T) {
	env.Need(t)
	home, local := env.Namespace(t, nil), env.Namespace(t, nil)
	dr := map[string]string{"dr": rand.String(8)}
	here := env.Namespace(t, dr) // labelled here: not a namespace of the remote cluster
	r1, r2, r3 := remoteEnv.Namespace(t, dr), remoteEnv.Namespace(t, dr), remoteEnv.Namespace(t, nil)
	if err := env.Client.Create(context.Background(), remoteCM(home, "src", nil, "1")); err != nil {
		t.Fatal(err)
	}
	kubeconfigSecret(t, home, "remote")
	ms := newSync(home, "fan-out", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src"}}},
		Transform: inline(remoteTransform),
		Params:    params(`{"env": "dr", "evalWorker": true}`),
		Targets: []v1alpha1.Target{
			{Name: "dr", NamespaceSelector: &metav1.LabelSelector{MatchLabels: dr},
				Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "remote"}}},
			{Name: "local", Namespace: local},
		},
	})
	createSync(t, ms)
	got := ready(t, ms)
	remoteConfigMapWith(t, timeout, ms, r1, "env", "dr")
	remoteConfigMapWith(t, timeout, ms, r2, "env", "dr")
	var rows []string
	for _, r := range got.Status.Targets {
		rows = append(rows, r.Cluster+":"+r.Namespace)
	}
	want := []string{"remote:" + r1, "remote:" + r2, "in-cluster:" + local}
	slices.Sort(rows)
	slices.Sort(want)
	if !slices.Equal(rows, want) {
		t.Errorf("status.targets = %q, want %q", rows, want)
	}
	for _, ns := range []string{r3, here} {
		if _, err := remoteConfigMap(ns, "cfg"); err == nil {
			t.Errorf("ConfigMap %s/cfg in the remote cluster, whose namespace the selector does not pick there", ns)
		}
	}
	if _, err := getConfigMap(here, "cfg"); err == nil {
		t.Errorf("ConfigMap %s/cfg in this cluster", here)
	}

	labelled := time.Now()
	setRemoteLabels(t, r3, dr)
	remoteConfigMapWith(t, timeout, ms, r3, "env", "dr")
	t.Logf("a namespace labelled in the remote cluster synced %v later", time.Since(labelled).Round(time.Millisecond))

	setRemoteLabels(t, r1, nil)
	eventually(t, timeout, func() error {
		if _, err := remoteConfigMap(r1, "cfg"); err == nil {
			return fmt.Errorf("ConfigMap %s/cfg is still in the remote cluster", r1)
		}
		return nil
	})
	remoteConfigMapWith(t, timeout, ms, r2, "env", "dr")

	start := stopRemote(t)
	setSource(t, home, "2")
	configMapWith(t, timeout, ms, local, "cfg", "v", "2")
	eventually(t, timeout, func() error {
		got := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		for _, ns := range []string{r2, r3} {
			if r := findRow(got.Status.Targets, "dr", ns); r == nil || r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `cluster "remote": unreachable`) {
				return fmt.Errorf("row dr/%s = %+v", ns, r)
			}
		}
		return nil
	})
	start()
	remoteConfigMapWith(t, 20*time.Second, ms, r2, "v", "2")
	remoteConfigMapWith(t, timeout, ms, r3, "v", "2")
}
