package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbac "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// hostilePeer is an internal HTTP service on 127.0.0.1 that a tenant names
// as its remote cluster: it answers every request (but /readyz, when ready)
// with code and body, of the content type given. It stops when the test
// ends.
func hostilePeer(t testing.TB, code int, contentType, body string, ready bool) string {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ready && r.URL.Path == "/readyz" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// failed waits until ms's Ready condition is False, for its current
// generation, with a reason other than Progressing, and returns it.
func failed(t testing.TB, ms *v1alpha1.ManifestSync) *v1alpha1.ManifestSync {
	t.Helper()
	got := &v1alpha1.ManifestSync{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.ObservedGeneration != got.Generation || c.Status != metav1.ConditionFalse || c.Reason == v1alpha1.ReasonProgressing {
			return fmt.Errorf("%s: Ready is %+v", ms.Name, c)
		}
		return nil
	})
	return got
}

// A tenant names, as a remote cluster (of a target or a source), an
// internal HTTP service that is no Kubernetes API server: what it answers
// (an HTML error page, a 500 whose lines look like /readyz's failed checks,
// or a JSON document that is no Kubernetes object) never reaches the
// tenant-readable status, the events, or the operator's logs. What the
// tenant gets: the status code and a fixed reason ("... with a body that
// is not a Kubernetes API status (withheld)"). Before, client-go's
// "an error on the server (\"<body>\")" and the probe's failed checks
// copied the body into all three: the operator served as a proxy to read
// internal services.
func TestRemoteBodiesWithheld(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	marker := "internal-" + rand.String(10)
	home := env.Namespace(t, nil)
	page := fmt.Sprintf("<html><body><h1>%s</h1>\n[-]etcd %s\n</body></html>", marker, marker)
	peers := map[string]string{
		"html-target": hostilePeer(t, http.StatusInternalServerError, "text/html", page, true),
		"html-source": hostilePeer(t, http.StatusInternalServerError, "text/html", page, false),
		"json-target": hostilePeer(t, http.StatusOK, "application/json", fmt.Sprintf(`{"secret": %q}`, marker), true),
	}
	var syncs []*v1alpha1.ManifestSync
	for name, url := range peers {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: name}, Data: map[string][]byte{"value": peerKubeconfig(url)}}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		ref := &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: name}}
		spec := v1alpha1.ManifestSyncSpec{Transform: inline(namesScript), Params: params(`{"names": ["a"]}`)}
		if strings.HasSuffix(name, "-source") {
			spec.Sources = []v1alpha1.Source{{Name: "src", Cluster: ref,
				Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "src", Namespace: "default"}}}
			spec.Targets = targets(home)
		} else {
			spec.Targets = []v1alpha1.Target{{Name: "far", Namespace: "default", Cluster: ref}}
		}
		ms := newSync(home, name, spec)
		createSync(t, ms)
		syncs = append(syncs, ms)
	}
	for _, ms := range syncs {
		got := failed(t, ms)
		raw, err := json.Marshal(got.Status)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), marker) {
			t.Errorf("%s: the status holds what the peer answered: %s", ms.Name, raw)
		}
		if !strings.Contains(string(raw), "withheld") && !strings.Contains(string(raw), "unreachable") {
			t.Errorf("%s: the status does not say why it failed: %s", ms.Name, raw)
		}
		t.Logf("%s: %s", ms.Name, condition(got, v1alpha1.ConditionReady).Message)
		// Its events, once recorded.
		eventually(t, timeout, func() error {
			var list eventsv1.EventList
			if err := env.Client.List(ctx, &list, client.InNamespace(home)); err != nil {
				return err
			}
			n := 0
			for _, e := range list.Items {
				if strings.Contains(e.Note, marker) {
					t.Fatalf("an event of %s holds what the peer answered: %q", e.Regarding.Name, e.Note)
				}
				if e.Regarding.Name == ms.Name && e.Type == corev1.EventTypeWarning {
					n++
				}
			}
			if n == 0 {
				return fmt.Errorf("no warning event of %s yet", ms.Name)
			}
			return nil
		})
	}
	if logs := operatorLogs.String(); strings.Contains(logs, marker) {
		i := strings.Index(logs, marker)
		t.Errorf("the operator logged what a peer answered: ...%s...", logs[max(0, i-200):min(len(logs), i+100)])
	}
}

// With spec.serviceAccountName, the kubeconfig Secret of a remote target
// is read as that service account: a tenant whose account may not read
// the Secret (an administrator's kubeconfig, in its namespace) gets the
// API server's 403, naming its account, and nothing is written to the
// remote cluster; not even when another ManifestSync, which may read it,
// has the operator holding a client of that cluster already. Granted a
// read of the Secret, the same ManifestSync syncs. Before, the operator
// read the Secret with its own rights: any tenant who could name a Secret
// could use the credentials in it.
func TestKubeconfigReadAsServiceAccount(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)
	kubeconfigSecret(t, home, "admin-kubeconfig")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "tenant"}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	remote := func(name, account string) *v1alpha1.ManifestSync {
		return newSync(home, name, v1alpha1.ManifestSyncSpec{
			ServiceAccountName: account,
			Transform:          inline(namesScript),
			Params:             params(fmt.Sprintf(`{"names": [%q]}`, name)),
			Targets: []v1alpha1.Target{{Name: "far", Namespace: remoteNS,
				Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "admin-kubeconfig"}}}},
		})
	}
	// A ManifestSync of the operator's rights builds the client first.
	first := remote("operators", "")
	createSync(t, first)
	ready(t, first)

	ms := remote("tenants", "tenant")
	createSync(t, ms)
	got := failed(t, ms)
	msg := condition(got, v1alpha1.ConditionReady).Message
	for _, r := range got.Status.Targets {
		msg += " | " + r.Message
	}
	for _, want := range []string{`kubeconfig Secret "admin-kubeconfig"`, "forbidden", "system:serviceaccount:" + home + ":tenant"} {
		if !strings.Contains(msg, want) {
			t.Errorf("status %q does not say %q", msg, want)
		}
	}
	if _, err := remoteConfigMap(remoteNS, "tenants"); err == nil {
		t.Error("the tenant's ConfigMap was written to the remote cluster with a kubeconfig its account may not read")
	}

	// Granted the read, it syncs.
	role := &rbac.Role{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "read-kubeconfig"},
		Rules: []rbac.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"admin-kubeconfig"}, Verbs: []string{"get"}}}}
	binding := &rbac.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "read-kubeconfig"},
		RoleRef:  rbac.RoleRef{APIGroup: rbac.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbac.Subject{{Kind: "ServiceAccount", Namespace: home, Name: "tenant"}}}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Params = params(`{"names": ["tenants"], "retry": 1}`) })
	ready(t, ms)
	if _, err := remoteConfigMap(remoteNS, "tenants"); err != nil {
		t.Errorf("the tenant's ConfigMap, once its account may read the kubeconfig: %v", err)
	}
}
