package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/helm/helmtest"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/ui/inspect"
)

const uiSecretValue = "hunter2-uieval-secret"

// The web UI's evaluator reads a ManifestSync's sources as its spec says,
// as the user: a git source from a loopback git daemon, substituted from a
// ConfigMap and a Secret of the cluster read through the user's client;
// the diff shows the object it would create with the Secret's value
// masked. A user who may not read that Secret gets the API server's
// refusal naming the source; a spec that names an object of another
// namespace not shared with its own gets refused as the operator refuses
// it (a hostile spec cannot borrow another namespace's objects through
// the UI); and no Secret value is in any result or error.
func TestUIEvaluator(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	other := env.Namespace(t, nil)

	repo := t.TempDir()
	for name, content := range map[string]string{
		"kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: dev-\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata:\n  env: ${env}\n  password: ${password}\n",
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root := gittest.TempDir(t)
	gittest.Publish(t, root, "app", repo)
	url := gittest.Daemon(t, root) + "/app.git"

	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vars"}, Data: map[string]string{"env": "staging"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"password": uiSecretValue}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "private"}, Data: map[string]string{"k": "v"}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"},
				Build: v1alpha1.Build{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "creds"}}}}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}},
		},
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The UI's worker starts at the first diff (and stops uiIdle after
	// the last: worker.TestPoolIdle).
	pool := ev.(*uiEvaluator).pool
	if n := pool.Running(); n != 0 {
		t.Errorf("%d workers before the first diff, want none", n)
	}

	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if n := pool.Running(); n != 1 {
		t.Errorf("%d workers after a diff, want 1", n)
	}
	if len(diffs) != 1 || diffs[0].Action != "Created" || diffs[0].Object != "ConfigMap "+ns+"/dev-settings" ||
		!strings.Contains(diffs[0].Unified, "+  env: staging") || !strings.Contains(diffs[0].Unified, "+  password: '***'") {
		t.Errorf("diffs %+v", diffs)
	}
	noSecret(t, diffs, nil)

	// A user who may not read the Secret.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "nobody"}
	nobody, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	_, err = inspect.Diff(ctx, nobody, ms, ev, "")
	if err == nil || !strings.Contains(err.Error(), `source "app"`) || !strings.Contains(err.Error(), `is forbidden: User "nobody"`) {
		t.Errorf("error %v: want the source named and the API server's refusal", err)
	}
	noSecret(t, nil, err)

	// An object of another namespace that does not share itself.
	hostile := ms.DeepCopy()
	hostile.Spec.Sources = append(hostile.Spec.Sources, v1alpha1.Source{Name: "borrowed",
		Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: other, Name: "private"}})
	_, err = inspect.Diff(ctx, env.Client, hostile, ev, "")
	if err == nil || !strings.Contains(err.Error(), `ConfigMap `+other+`/private: access refused`) {
		t.Errorf("error %v: want access refused", err)
	}
}

// noSecret fails t when uiSecretValue is in diffs or err.
func noSecret(t *testing.T, diffs []inspect.ObjectDiff, err error) {
	t.Helper()
	b, _ := json.Marshal(diffs)
	if err != nil {
		b = append(b, err.Error()...)
	}
	if strings.Contains(string(b), uiSecretValue) {
		t.Errorf("the Secret's value shows: %s", b)
	}
}

// A helm source: the chart fetched from a loopback chart repository with
// the credentials of its secretRef, read through the user's client; the
// diff shows the chart's object; the repository's password shows
// nowhere.
func TestUIEvaluatorHelm(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	repo := helmtest.NewRepo(t)
	repo.Add("demo", "1.2.0", helmtest.Package("demo", helmtest.Chart("demo", "1.2.0", map[string]string{"README.md": t.Name() + "\n"})))
	repo.RequireAuth("robot", "chart-pw-ui-1234")
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "charts"},
		StringData: map[string]string{"username": "robot", "password": "chart-pw-ui-1234"}}); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "chart", Helm: &v1alpha1.HelmSource{Chart: "demo", Version: "^1", Repository: repo.URL,
				Insecure: true, SecretRef: &v1alpha1.LocalObjectReference{Name: "charts"}}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: ns}},
		},
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Object != "ConfigMap "+ns+"/web-demo" || !strings.Contains(diffs[0].Unified, "+  version: 1.2.0") {
		t.Errorf("diffs %+v", diffs)
	}
	b, _ := json.Marshal(diffs)
	if strings.Contains(string(b), "chart-pw-ui-1234") {
		t.Errorf("the password shows: %s", b)
	}
}

const uiSetSecretValue = "objset-pw-7431-uieval"

// The web UI evaluates object set sources of every form as the operator
// does, through the operator's own reading of them: a namespaceSelector
// set (its labelSelector and exclude applied, objects of other namespaces
// shared with the ManifestSync's) and a whole-namespace set (the kinds
// discovery gives, minus those the operator leaves out). Before the
// operator syncs, the diff creates exactly those objects, the Secrets'
// values masked; once it has synced, the objects the diff evaluates are
// the operator's inventory, all unchanged.
func TestUIEvaluatorObjectSets(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	home, dest := env.Namespace(t, nil), env.Namespace(t, nil)
	picked := map[string]string{"uieval-picked": home} // unique to this test
	p1, p2 := env.Namespace(t, picked), env.Namespace(t, picked)
	unpicked := env.Namespace(t, nil)
	labelled := map[string]string{"replicate": "yes"}
	shared := map[string]string{controller.AllowNamespacesAnnotation: home}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p1, Name: "shared-a", Labels: labelled, Annotations: shared},
			StringData: map[string]string{"value": uiSetSecretValue + "-a"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p1, Name: "internal-ca", Labels: labelled, Annotations: shared}}, // excluded
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p1, Name: "plain", Annotations: shared}},                         // not labelled
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p2, Name: "shared-b", Labels: labelled, Annotations: shared},
			StringData: map[string]string{"value": uiSetSecretValue + "-b"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: unpicked, Name: "shared-c", Labels: labelled, Annotations: shared}}, // not picked
		// The whole of home: a ConfigMap, a Secret and a ServiceAccount;
		// not a service account's token nor a Lease.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "cfg"}, Data: map[string]string{"a": "b"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "db"}, StringData: map[string]string{"password": uiSetSecretValue}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "app"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "app-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "app"}},
			Type: corev1.SecretTypeServiceAccountToken},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "leader"}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "sets"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{
				{Name: "picked", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "Secret",
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: picked},
					LabelSelector:     &metav1.LabelSelector{MatchLabels: labelled}, Exclude: []string{"internal-.*"}}},
				{Name: "whole", Objects: &v1alpha1.ObjectSetSource{Namespace: home}},
			},
			Targets: []v1alpha1.Target{{Name: "copy", Namespace: dest}},
		},
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	want := []string{"ConfigMap " + dest + "/cfg", "Secret " + dest + "/db", "Secret " + dest + "/shared-a", "Secret " + dest + "/shared-b",
		"ServiceAccount " + dest + "/app"}
	diffs, err := inspect.Diff(ctx, env.Client, ms, ev, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := diffObjects(diffs, "Created"); !slices.Equal(got, want) {
		t.Errorf("created %v, want %v; diffs %+v", got, want, diffs)
	}
	for _, d := range diffs {
		if strings.HasPrefix(d.Object, "Secret ") && !strings.Contains(d.Unified, "'*** (after)'") {
			t.Errorf("%s: the value is not masked:\n%s", d.Object, d.Unified)
		}
	}
	noValue(t, uiSetSecretValue, diffs, nil)

	// The operator syncs it: the UI evaluates the objects it applied.
	env.CreateSync(t, ms, time.Minute)
	synced := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, time.Minute)
	var inventory []string
	for _, e := range synced.Status.Inventory {
		// ID: namespace_name_group_Kind
		parts := strings.Split(e.ID, "_")
		if len(parts) != 4 {
			t.Fatalf("inventory entry %q", e.ID)
		}
		inventory = append(inventory, parts[3]+" "+parts[0]+"/"+parts[1])
	}
	slices.Sort(inventory)
	if !slices.Equal(inventory, want) {
		t.Errorf("the operator's inventory %v, want %v", inventory, want)
	}
	if diffs, err = inspect.Diff(ctx, env.Client, synced, ev, ""); err != nil {
		t.Fatal(err)
	}
	if got := diffObjects(diffs, "Unchanged"); !slices.Equal(got, inventory) {
		t.Errorf("after the operator's sync: unchanged %v, want the inventory %v; diffs %+v", got, inventory, diffs)
	}
	noValue(t, uiSetSecretValue, diffs, nil)
}

// A user who may read ConfigMaps of their own namespace only: a set of
// their namespace evaluates; a set of another namespace, shared with
// theirs, is refused with the API server's own message and the source
// named; so is a namespaceSelector set (they may not list namespaces);
// and so is a source of another cluster whose kubeconfig Secret they may
// not read.
func TestUIEvaluatorObjectSetsAsUser(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	home, other := env.Namespace(t, nil), env.Namespace(t, nil)
	user := "uieval-" + home
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "mine"}, Data: map[string]string{"a": "b"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "theirs",
			Annotations: map[string]string{controller.AllowNamespacesAnnotation: home}}, Data: map[string]string{"c": "d"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "read"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "read"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	c := env.ClientAs(t, user)
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sync := func(src v1alpha1.Source) *v1alpha1.ManifestSync {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "app"},
			Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{src}, Targets: []v1alpha1.Target{{Name: "dev", Namespace: home}}}}
	}

	res, err := ev.Evaluate(ctx, c, sync(v1alpha1.Source{Name: "mine", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap"}}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range res.Targets {
		for _, o := range tr.Objects {
			names = append(names, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	// kube-root-ca.crt, when a controller manager publishes it, is the
	// operator's to leave out too: only "mine" is checked for.
	if !slices.Contains(names, "ConfigMap "+home+"/mine") {
		t.Errorf("objects %v: want ConfigMap %s/mine", names, home)
	}

	_, err = ev.Evaluate(ctx, c, sync(v1alpha1.Source{Name: "theirs", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: other}}))
	want := `configmaps is forbidden: User "` + user + `" cannot list resource "configmaps" in API group "" in the namespace "` + other + `"`
	if err == nil || !strings.Contains(err.Error(), `source "theirs"`) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v: want the source named and %q", err, want)
	}

	_, err = ev.Evaluate(ctx, c, sync(v1alpha1.Source{Name: "selected", Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap",
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"any": "x"}}}}))
	want = `namespaces is forbidden: User "` + user + `" cannot list resource "namespaces"`
	if err == nil || !strings.Contains(err.Error(), `source "selected"`) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v: want the source named and %q", err, want)
	}

	_, err = ev.Evaluate(ctx, c, sync(v1alpha1.Source{Name: "remote", Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "kc"}},
		Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap"}}))
	want = `secrets "kc" is forbidden: User "` + user + `" cannot get resource "secrets"`
	if err == nil || !strings.Contains(err.Error(), `source "remote"`) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v: want the source named and %q", err, want)
	}
}

// A source of another cluster is read with its kubeconfig Secret's
// credentials once the user has read the Secret (a user who may not is
// refused above): here the "other cluster" is the test's own, reached
// through a kubeconfig of its own, and the remote allow-list is its
// credentials' (an object of another namespace is read unshared, as the
// operator reads it). A kubeconfig that would run a program is refused,
// whatever the user may read: a page view never runs a command a Secret
// names.
func TestUIEvaluatorRemoteSource(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	home, other := env.Namespace(t, nil), env.Namespace(t, nil)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Token: env.Config.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	good, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/true", APIVersion: "client.authentication.k8s.io/v1"}}
	execing, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "far"}, Data: map[string]string{"k": "v"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "kc"}, Data: map[string][]byte{"value": good}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "exec"}, Data: map[string][]byte{"value": execing}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ev, stop, err := newUIEvaluator("ui", env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sync := func(secret string) *v1alpha1.ManifestSync {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "app"},
			Spec: v1alpha1.ManifestSyncSpec{
				Sources: []v1alpha1.Source{{Name: "remote", Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: secret}},
					Objects: &v1alpha1.ObjectSetSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: other}}},
				Targets: []v1alpha1.Target{{Name: "dev", Namespace: home}}}}
	}
	res, err := ev.Evaluate(ctx, env.Client, sync("kc"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range res.Targets {
		for _, o := range tr.Objects {
			names = append(names, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	if !slices.Contains(names, "ConfigMap "+home+"/far") {
		t.Errorf("objects %v: want the remote ConfigMap far, copied into %s", names, home)
	}
	_, err = ev.Evaluate(ctx, env.Client, sync("exec"))
	if err == nil || !strings.Contains(err.Error(), `source "remote"`) || !strings.Contains(err.Error(), "plugin") {
		t.Errorf("error %v: want the source named and the exec plugin refused", err)
	}
}

// diffObjects are the objects of diffs whose action is action, sorted.
func diffObjects(diffs []inspect.ObjectDiff, action string) []string {
	var out []string
	for _, d := range diffs {
		if d.Action == action {
			out = append(out, d.Object)
		}
	}
	slices.Sort(out)
	return out
}

// noValue fails t when value is in diffs or err.
func noValue(t *testing.T, value string, diffs []inspect.ObjectDiff, err error) {
	t.Helper()
	b, _ := json.Marshal(diffs)
	if err != nil {
		b = append(b, err.Error()...)
	}
	if strings.Contains(string(b), value) {
		t.Errorf("a Secret's value shows: %s", b)
	}
}
