package controller

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// drTransform makes a standby copy of a namespace: Deployments and
// StatefulSets scaled to 0 with their count in manifestsync.dev/replicas
// (restored when params.active), Services without the cluster IPs the
// primary allocated (a headless one keeps None), Jobs without the
// selector and labels the primary's API server generated.
const drTransform = `
REPLICAS = "manifestsync.dev/replicas"

def main(ctx):
    active = ctx.params.get("active", False)
    out = []
    for o in ctx.sources["shop"].objects:
        kind = o["kind"]
        if kind in ("Deployment", "StatefulSet"):
            count = o["spec"].get("replicas", 1)
            o = k8s.merge_patch(o, {
                "metadata": {"annotations": {REPLICAS: str(count)}},
                "spec": {"replicas": count if active else 0},
            })
        elif kind == "Service" and o["spec"].get("clusterIP") != "None":
            o = k8s.merge_patch(o, {"spec": {"clusterIP": None, "clusterIPs": None}})
        elif kind == "Job":
            uid = {"controller-uid": None, "batch.kubernetes.io/controller-uid": None}
            o = k8s.merge_patch(o, {"metadata": {"labels": uid}, "spec": {"selector": None, "template": {"metadata": {"labels": uid}}}})
        out.append(o)
    return out
`

// shopNamespace creates, in the remote cluster, namespace ns as the DR
// flow's primary holds it: 3 Deployments, 2 Services (one headless), 2
// ConfigMaps, 1 Secret and 1 Job.
func shopNamespace(t testing.TB, ns string) {
	t.Helper()
	createRemote(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	t.Cleanup(func() {
		_ = remoteEnv.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	pod := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: app, Image: "example.com/" + app + ":1"}}},
		}
	}
	for app, replicas := range map[string]int32{"web": 3, "api": 2, "worker": 1} {
		createRemote(t, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Template: pod(app),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
		})
	}
	port := []corev1.ServicePort{{Name: "http", Port: 80}}
	createRemote(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: port}})
	createRemote(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-peers"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "api"}, Ports: port}})
	createRemote(t, remoteCM(ns, "web-config", nil, "1"))
	createRemote(t, remoteCM(ns, "api-config", nil, "1"))
	createRemote(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-credentials"},
		StringData: map[string]string{"password": "s3cr3t-dr-value"}})
	job := pod("migrate")
	job.Spec.RestartPolicy = corev1.RestartPolicyNever
	createRemote(t, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrate"}, Spec: batchv1.JobSpec{Template: job}})
}

// deploymentIs waits until the Deployment ns/name of this cluster has
// the replicas and the annotation of the original count.
func deploymentIs(t testing.TB, within time.Duration, ns, name string, replicas, original int32) {
	t.Helper()
	eventually(t, within, func() error {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		if got := ptr.Deref(d.Spec.Replicas, -1); got != replicas || d.Annotations["manifestsync.dev/replicas"] != strconv.Itoa(int(original)) {
			return fmt.Errorf("Deployment %s/%s: replicas %d, annotations %v; want %d and %d", ns, name, got, d.Annotations, replicas, original)
		}
		return nil
	})
}

// The DR flow: namespace shop of the primary (the remote cluster), read
// whole with one objects source, is mirrored into this cluster with
// workloads scaled to 0 and their counts kept; a change in the primary is
// in the copy within 2 s; the primary down, the copy stays as it was and
// the ManifestSync says SourceFailed; back, it syncs; active: true
// restores the replica counts.
func TestDRNamespaceFromRemoteCluster(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	shop := "shop-" + rand.String(5)
	shopNamespace(t, shop)
	home := env.Namespace(t, nil)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shop}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shop}})
	})
	kubeconfigSecret(t, home, "primary")
	ms := newSync(home, "dr-shop", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "shop", Cluster: primary, Objects: &v1alpha1.ObjectSetSource{Namespace: shop}}},
		Transform: inline(drTransform),
		Params:    params(`{"active": false}`),
		Targets:   []v1alpha1.Target{{Name: "standby", Namespace: shop}},
	})
	start := time.Now()
	createSync(t, ms)
	got := ready(t, ms)
	t.Logf("namespace mirrored %v after the ManifestSync was created", time.Since(start).Round(time.Millisecond))
	for name, n := range map[string]int32{"web": 3, "api": 2, "worker": 1} {
		deploymentIs(t, timeout, shop, name, 0, n)
	}
	var kinds []string
	for _, e := range got.Status.Inventory {
		kinds = append(kinds, e.ID)
	}
	if len(got.Status.Inventory) != 9 {
		t.Errorf("inventory = %q, want the 9 objects of the namespace", kinds)
	}
	svc := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "api-peers"}, svc); err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service: %v, clusterIP %q", err, svc.Spec.ClusterIP)
	}
	primarySvc := &corev1.Service{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "web"}, primarySvc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "web"}, svc); err != nil || svc.Spec.ClusterIP == "" {
		t.Errorf("Service web: %v, clusterIP %q", err, svc.Spec.ClusterIP)
	} else if svc.Spec.ClusterIP == primarySvc.Spec.ClusterIP {
		t.Logf("Service web got the primary's cluster IP %s by chance (the two API servers allocate from the same range)", svc.Spec.ClusterIP)
	}
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "api-credentials"}, secret); err != nil || string(secret.Data["password"]) != "s3cr3t-dr-value" {
		t.Errorf("Secret: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "migrate"}, &batchv1.Job{}); err != nil {
		t.Errorf("Job: %v", err)
	}

	changed := time.Now()
	setRemote(t, shop, "web-config", "2")
	configMapWith(t, 2*time.Second, ms, shop, "web-config", "v", "2")
	t.Logf("a change in the primary is in the copy %v later", time.Since(changed).Round(time.Millisecond))

	startPrimary := stopRemote(t)
	sourceFailed(t, ms, `source "shop": cluster "primary": unreachable`)
	deploymentIs(t, 0, shop, "web", 0, 3)
	configMapWith(t, 0, ms, shop, "web-config", "v", "2")
	startPrimary()
	ready(t, ms)

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"active": true}`) })
	for name, n := range map[string]int32{"web": 3, "api": 2, "worker": 1} {
		deploymentIs(t, timeout, shop, name, n, n)
	}
	ready(t, ms)
	if strings.Contains(operatorLogs.String(), "s3cr3t-dr-value") {
		t.Error("the operator logged the Secret's value")
	}
}
