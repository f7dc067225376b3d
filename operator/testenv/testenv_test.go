package testenv

import (
	"context"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var env *Env

func TestMain(m *testing.M) { os.Exit(Run(m, &env)) }

func TestRequestsCountWrites(t *testing.T) {
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := env.Namespace(t, nil)

	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	isConfigMap := func(verb string) func(Request) bool {
		return func(r Request) bool { return r.Verb == verb && r.Group == "" && r.Resource == "configmaps" }
	}
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-" + string(rune('a'+i))}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, keyOf(ns, "cm-a"), cm); err != nil {
		t.Fatal(err)
	}
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if got := d.Count(isConfigMap("POST")); got != 3 {
		t.Errorf("configmap POSTs: got %v, want 3 (%v)", got, d)
	}
	if got := d.Count(isConfigMap("GET")); got != 1 {
		t.Errorf("configmap GETs: got %v, want 1 (%v)", got, d)
	}
	if got := d.Writes(); got != 3 {
		t.Errorf("writes: got %v, want 3 (%v)", got, d)
	}
}

func TestParseRequests(t *testing.T) {
	raw := []byte(`# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="secrets",scope="resource",subresource="",verb="POST",version="v1"} 4
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="secrets",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="status",verb="APPLY",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="secrets",scope="resource",subresource="",verb="GET",version="v1"} 9
`)
	r, err := parseRequests(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := r[Request{Verb: "POST", Resource: "secrets"}]; got != 5 {
		t.Errorf("secret POSTs: got %v, want 5", got)
	}
	if got := r.Writes(); got != 7 {
		t.Errorf("writes without leases and event series: got %v, want 7", got)
	}
	if got := r.Sub(Requests{{Verb: "GET", Resource: "secrets"}: 4})[Request{Verb: "GET", Resource: "secrets"}]; got != 5 {
		t.Errorf("GETs since: got %v, want 5", got)
	}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func TestMissingAssetsSayWhatToRun(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := assetsDir("/nonexistent", "etcd", "kube-apiserver")
	if err == nil || !strings.Contains(err.Error(), "run make envtest") {
		t.Fatalf("got %v, want an error saying to run make envtest", err)
	}
}

// A killed API server refuses connections until it is started again,
// with the objects it held and the clients it had.
func TestKillAPIServer(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	// A graceful stop waits for requests to drain (a minute and more).
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("killing the API server took %v", took)
	}
	if err := env.Client.Get(ctx, keyOf(ns, "kept"), cm); err == nil {
		t.Error("the killed API server answered")
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, keyOf(ns, "kept"), cm); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}

// An API server that cannot start (its port is taken) is tried three
// times; the error then says why it exited, in its own words, and the
// server starts once the port is free.
func TestStartAPIServerSaysWhyItExits(t *testing.T) {
	env.Need(t)
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = env.StartAPIServer()
	l.Close()
	if err == nil {
		t.Fatal("the API server started on a port in use")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("the error does not say why the API server exited: %v", err)
	} else {
		t.Logf("as it should: %v", err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("StartAPIServer gave up after %v: it waits 1 s and 2 s between its three tries", took)
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatalf("with its port free: %v", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(env.Config).Discovery().ServerVersion(); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}

// A watch from resourceVersion "0" with bookmarks (as kwok's) is a plain
// watch that sees changes, not a watch-list stream the API server ends at
// once for want of etcd progress notifications.
func TestWatchFromZeroSeesChanges(t *testing.T) {
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := env.Namespace(t, nil)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seen"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before it saw ConfigMap seen")
			}
			switch obj := ev.Object.(type) {
			case *metav1.Status:
				t.Fatalf("the watch ended with an error: %s", obj.Message)
			case *corev1.ConfigMap:
				if ev.Type == watch.Added && obj.Name == "seen" {
					return
				}
			}
		case <-ctx.Done():
			t.Fatal("the watch did not see ConfigMap seen")
		}
	}
}
