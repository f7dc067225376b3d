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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/stdlib"
)

// drTransform is examples/dr-namespace's transform: the dr module makes
// the standby copy (workloads at 0 with their counts in
// manifestsync.dev/replicas, restored when params.active; Services
// without the addresses the primary allocated; Jobs left out).
const drTransform = `
def main(ctx):
    return dr.copy(ctx.sources["shop"].objects, active = ctx.params["active"], strip_node_ports = True)
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

// deploymentIs waits until the Deployment ns/name of c has the replicas
// and the annotation of the original count kept ("" for none).
func deploymentIs(t testing.TB, c client.Reader, within time.Duration, ns, name string, want int32, kept string) {
	t.Helper()
	eventually(t, within, func() error {
		d := &appsv1.Deployment{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return err
		}
		got, ok := d.Annotations[stdlib.ReplicasAnnotation]
		n := ptr.Deref(d.Spec.Replicas, 1) // 1: the API server's default
		if n != want || got != kept || ok != (kept != "") {
			return fmt.Errorf("Deployment %s/%s: replicas %d, annotation %q (set: %v), want %d and %q", ns, name, n, got, ok, want, kept)
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
		deploymentIs(t, env.Client, timeout, shop, name, 0, strconv.Itoa(int(n)))
	}
	var kinds []string
	for _, e := range entriesOf(t, got) {
		kinds = append(kinds, e.ID)
	}
	if len(entriesOf(t, got)) != 8 {
		t.Errorf("inventory = %q, want the 8 objects of the namespace but its Job", kinds)
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
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: shop, Name: "migrate"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("Job migrate: got %v, want NotFound (a Job would run again in the standby)", err)
	}

	changed := time.Now()
	setRemote(t, shop, "web-config", "2")
	configMapWith(t, 2*time.Second, ms, shop, "web-config", "v", "2")
	t.Logf("a change in the primary is in the copy %v later", time.Since(changed).Round(time.Millisecond))

	startPrimary := stopRemote(t)
	sourceFailed(t, ms, `source "shop": cluster "primary": unreachable`)
	deploymentIs(t, env.Client, 0, shop, "web", 0, "3")
	configMapWith(t, 0, ms, shop, "web-config", "v", "2")
	startPrimary()
	ready(t, ms)

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"active": true}`) })
	for name, n := range map[string]int32{"web": 3, "api": 2, "worker": 1} {
		deploymentIs(t, env.Client, timeout, shop, name, n, "")
	}
	ready(t, ms)
	if strings.Contains(operatorLogs.String(), "s3cr3t-dr-value") {
		t.Error("the operator logged the Secret's value")
	}
}

// The DR flow the other way round: namespace shop of this cluster copied
// into a namespace of the remote one, a remote target: the standby's API
// server allocates its own addresses and node ports (the headless Service
// stays headless), the Job is left out, a change in shop follows, and
// active: true restores the counts.
func TestDRNamespaceIntoRemoteCluster(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, shop := env.Namespace(t, nil), env.Namespace(t, nil)
	standby := remoteEnv.Namespace(t, nil)
	create := func(obj client.Object) {
		t.Helper()
		obj.SetNamespace(shop)
		obj.SetAnnotations(map[string]string{AllowNamespacesAnnotation: home})
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.example.com/shop/" + name + ":1"}}},
		}
	}
	replicas := map[string]int32{"web": 3, "api": 2, "worker": 1}
	for _, name := range []string{"web", "api", "worker"} {
		n := replicas[name]
		create(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
			Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}, Template: pod(name),
		}})
	}
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
	}})
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "api-peers"}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "api"}, Ports: []corev1.ServicePort{{Name: "gossip", Port: 7946}},
	}})
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config"}, Data: map[string]string{"LOG_LEVEL": "info"}})
	create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "api-config"}, Data: map[string]string{"POOL_SIZE": "20"}})
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-credentials"}, Data: map[string][]byte{"DB_PASSWORD": []byte("s3cr3t")}})
	migrate := pod("migrate")
	migrate.Spec.RestartPolicy = corev1.RestartPolicyNever
	create(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "migrate"}, Spec: batchv1.JobSpec{Template: migrate}})

	kubeconfigSecret(t, home, "standby")
	ms := newSync(home, "shop-dr", v1alpha1.ManifestSyncSpec{
		Sources:   []v1alpha1.Source{{Name: "shop", Objects: &v1alpha1.ObjectSetSource{Namespace: shop}}},
		Transform: inline(drTransform),
		Params:    params(`{"active": false}`),
		Targets: []v1alpha1.Target{{Name: "standby", Namespace: standby,
			Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "standby"}}}},
	})
	createSync(t, ms)
	ready(t, ms)

	// The standby: every workload at 0, its count kept.
	for name, n := range replicas {
		deploymentIs(t, remoteEnv.Client, timeout, standby, name, 0, strconv.Itoa(int(n)))
	}
	local := &corev1.Service{}
	if err := env.Client.Get(ctx, keyOf(shop, "web"), local); err != nil {
		t.Fatal(err)
	}
	web, peers := &corev1.Service{}, &corev1.Service{}
	if err := remoteEnv.Client.Get(ctx, keyOf(standby, "web"), web); err != nil {
		t.Fatal(err)
	}
	if err := remoteEnv.Client.Get(ctx, keyOf(standby, "api-peers"), peers); err != nil {
		t.Fatal(err)
	}
	// The standby's API server allocated its own address and node port
	// (both API servers allocate from the same ranges: the copy could not
	// have kept the primary's without asking for them).
	if web.Spec.ClusterIP == "" || web.Spec.ClusterIP == corev1.ClusterIPNone || web.Spec.Ports[0].NodePort == 0 {
		t.Errorf("standby Service web: clusterIP %q, nodePort %d", web.Spec.ClusterIP, web.Spec.Ports[0].NodePort)
	}
	if peers.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("standby Service api-peers: clusterIP %q, want None", peers.Spec.ClusterIP)
	}
	for _, c := range []struct {
		obj  client.Object
		name string
	}{{&corev1.ConfigMap{}, "web-config"}, {&corev1.ConfigMap{}, "api-config"}, {&corev1.Secret{}, "api-credentials"}} {
		if err := remoteEnv.Client.Get(ctx, keyOf(standby, c.name), c.obj); err != nil {
			t.Errorf("standby %s: %v", c.name, err)
		}
	}
	if err := remoteEnv.Client.Get(ctx, keyOf(standby, "migrate"), &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Errorf("standby Job migrate: got %v, want NotFound", err)
	}

	// A change in the primary reaches the standby (the time is logged; the
	// 2 s target is the benchmark's to judge).
	scaled := &appsv1.Deployment{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, keyOf(shop, "web"), scaled); err != nil {
			return err
		}
		five := int32(5)
		scaled.Spec.Replicas = &five
		return env.Client.Update(ctx, scaled)
	})
	start := time.Now()
	deploymentIs(t, remoteEnv.Client, timeout, standby, "web", 0, "5")
	t.Logf("a change in the primary in the standby after %v", time.Since(start).Round(time.Millisecond))

	// Failover: the counts come back, the annotation goes.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"active": true}`) })
	replicas["web"] = 5
	for name, n := range replicas {
		deploymentIs(t, remoteEnv.Client, timeout, standby, name, n, "")
	}
}
