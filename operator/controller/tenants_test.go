package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The tenant suite: an API server of its own (RBAC on), the operator
// running as its service account with exactly the default install's
// ClusterRoles (operator/config/rbac: role.yaml and apply_role.yaml, which
// the chart renders the same by default) and, as `engine operator` does
// by default, only its own namespace trusted. Team namespaces are
// tenants: whoever may create a ManifestSync in one tries every route out
// of it; each is refused with a reason, nothing of the refused target is
// in the API server, and the same ManifestSync works once the target
// namespace allows it or a service account is granted it.

// operatorNamespace is the namespace of the default install.
const operatorNamespace = "manifestsync-system"

// operatorUser is the operator's identity: its service account.
const operatorUser = "system:serviceaccount:" + operatorNamespace + ":manifestsync"

// tenantCluster is the suite's API server and the operator's identity.
type tenantCluster struct {
	env *testenv.Env
	// operator is the config of the operator's identity.
	operator *rest.Config
}

func startTenantCluster(t *testing.T) *tenantCluster {
	t.Helper()
	var te *envtest.Environment
	e, err := testenv.Start(func(x *envtest.Environment) error { te = x; return nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the tenants' API server: %v", err)
		}
	})
	user, err := te.AddUser(envtest.User{Name: operatorUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tenantCluster{env: e, operator: user.Config()}
	tc.operator.QPS, tc.operator.Burst = e.Config.QPS, e.Config.Burst
	tc.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}})
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"role.yaml", "apply_role.yaml"} {
		raw, err := os.ReadFile(filepath.Join(root, "operator", "config", "rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.ClusterRole{}
		if err := yaml.UnmarshalStrict(raw, role); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		tc.create(t, role, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNamespace, Name: "manifestsync"}},
		})
	}
	return tc
}

// start runs an operator as the operator's identity until the test ends;
// stop ends it sooner.
func (tc *tenantCluster) start(t *testing.T, opts Options) (stop func()) {
	t.Helper()
	skip := true
	probe, err := NewAPIServerProbe(tc.operator)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(tc.operator, ctrl.Options{
		Scheme:                 tc.env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields(), NewInformer: probe.NewInformer},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	opts.APIServer = probe
	if opts.RetryMin == 0 {
		opts.RetryMin, opts.RetryMax = 100*time.Millisecond, 2*time.Second
	}
	opts.Evaluator = evaluators
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reconciler{Options: opts}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	started, err := testenv.StartManager(ctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(started)
	t.Cleanup(stop)
	return stop
}

func (tc *tenantCluster) create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := tc.env.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// namespace creates a namespace, with the allow-from annotation when
// allowFrom is not empty.
func (tc *tenantCluster) namespace(t *testing.T, name, allowFrom string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if allowFrom != "" {
		ns.Annotations = map[string]string{AllowFromAnnotation: allowFrom}
	}
	tc.create(t, ns)
}

// allowFrom sets (or, with "", removes) a namespace's allow-from
// annotation, as its owner would.
func (tc *tenantCluster) allowFrom(t *testing.T, name, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AllowFromAnnotation, value)
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, AllowFromAnnotation)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := tc.env.Client.Patch(context.Background(), ns, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func (tc *tenantCluster) wait(t *testing.T, ms *v1alpha1.ManifestSync, reason string) *v1alpha1.ManifestSync {
	t.Helper()
	return tc.env.WaitForReason(t, client.ObjectKeyFromObject(ms), reason, timeout)
}

// absent fails the test when obj exists: nothing of a refused target may
// be in the API server.
func (tc *tenantCluster) absent(t *testing.T, obj client.Object) {
	t.Helper()
	err := tc.env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if !apierrors.IsNotFound(err) {
		t.Errorf("%T %s/%s: %v, want NotFound: a refused target wrote it", obj, obj.GetNamespace(), obj.GetName(), err)
	}
}

// configMap reads a ConfigMap; nil when there is none.
func (tc *tenantCluster) configMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := tc.env.Client.Get(context.Background(), keyOf(ns, name), cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return cm
}

// event waits for a Warning event of ms with the reason and text.
func (tc *tenantCluster) event(t *testing.T, ms *v1alpha1.ManifestSync, reason, text string) {
	t.Helper()
	eventually(t, timeout, func() error {
		var list eventsv1.EventList
		if err := tc.env.Client.List(context.Background(), &list, client.InNamespace(ms.Namespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == ms.Name && e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Note, text) {
				return nil
			}
		}
		return fmt.Errorf("no Warning %s event of %s with %q among %d events", reason, ms.Name, text, len(list.Items))
	})
}

// outputs is a transform whose output for each target name is the
// objects given (JSON reads as Starlark).
func outputs(t *testing.T, byTarget map[string][]map[string]any) *v1alpha1.Transform {
	t.Helper()
	out, err := json.Marshal(byTarget)
	if err != nil {
		t.Fatal(err)
	}
	return inline(fmt.Sprintf("OUT = %s\n\ndef main(ctx):\n    return OUT.get(ctx.target.name, [])\n", out))
}

// oneTarget is a ManifestSync of home with one target, of namespace ns,
// whose output is obj.
func oneTarget(t *testing.T, home, name, target, ns string, obj map[string]any) *v1alpha1.ManifestSync {
	return newSync(home, name, v1alpha1.ManifestSyncSpec{
		Transform: outputs(t, map[string][]map[string]any{target: {obj}}),
		Targets:   []v1alpha1.Target{{Name: target, Namespace: ns}},
	})
}

func configMapObj(ns, name, value string) map[string]any {
	m := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": map[string]any{"v": value}}
	if ns != "" {
		m["metadata"].(map[string]any)["namespace"] = ns
	}
	return m
}

func roleObj(name string, verbs ...string) map[string]any {
	return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": map[string]any{"name": name},
		"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets", "configmaps"}, "verbs": verbs}}}
}

func bindingObj(name, roleKind, role string) map[string]any {
	return map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}}}
}

// refused checks that target row name of ms was refused by the gate with
// every one of texts in its message.
func refused(t *testing.T, ms *v1alpha1.ManifestSync, name string, texts ...string) {
	t.Helper()
	r := row(ms, name)
	if r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, v1alpha1.ReasonTargetNotAllowed+": ") {
		t.Errorf("target %q = %+v, want Failed with %s", name, r, v1alpha1.ReasonTargetNotAllowed)
	}
	for _, text := range texts {
		if !strings.Contains(r.Message, text) {
			t.Errorf("target %q message %q lacks %q", name, r.Message, text)
		}
	}
}

func synced(t *testing.T, ms *v1alpha1.ManifestSync, name string) {
	t.Helper()
	if r := row(ms, name); r.State != v1alpha1.TargetSynced {
		t.Errorf("target %q = %+v, want Synced", name, r)
	}
}

func TestTenants(t *testing.T) {
	env.Need(t)
	tc := startTenantCluster(t)
	for _, ns := range []string{"team-a", "team-b", "team-c", "team-d"} {
		tc.namespace(t, ns, "")
	}
	tc.namespace(t, "shared", "team-a, team-c")
	stop := tc.start(t, Options{TrustedNamespaces: []string{operatorNamespace}, DeletionTimeout: 3 * time.Second})

	// A tenant writes into its own namespace as before.
	t.Run("own namespace", func(t *testing.T) {
		ms := oneTarget(t, "team-a", "own", "home", "team-a", configMapObj("", "own", "1"))
		tc.create(t, ms)
		tc.wait(t, ms, v1alpha1.ReasonSynced)
		if cm := tc.configMap(t, "team-a", "own"); cm == nil || cm.Data["v"] != "1" {
			t.Errorf("ConfigMap team-a/own = %v", cm)
		}
	})

	// Writing into another namespace, as a target's namespace or as an
	// object's own metadata.namespace, is refused until that namespace
	// allows it; the other targets go on.
	t.Run("another namespace", func(t *testing.T) {
		ms := newSync("team-a", "cross", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"home":  {configMapObj("", "home", "1")},
				"b":     {configMapObj("", "b-cfg", "1")},
				"loose": {{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "loose", "namespace": "kube-system"}, "stringData": map[string]any{"k": "v"}}},
			}),
			Targets: []v1alpha1.Target{{Name: "home", Namespace: "team-a"}, {Name: "b", Namespace: "team-b"}, {Name: "loose"}},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
		synced(t, got, "home")
		refused(t, got, "b", `ConfigMap team-b/b-cfg: namespace "team-b" does not allow writes from "team-a" (annotation manifestsync.dev/allow-from)`)
		refused(t, got, "loose", `Secret kube-system/loose: namespace "kube-system" does not allow writes from "team-a" (annotation manifestsync.dev/allow-from)`)
		if c := condition(got, v1alpha1.ConditionStalled); c.Status != metav1.ConditionTrue {
			t.Errorf("Stalled = %+v, want True: a refusal waits for the namespace's owner, not a retry", c)
		}
		tc.absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "b-cfg"}})
		tc.absent(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "loose"}})
		tc.event(t, ms, EventTargetNotAllowed, `ConfigMap team-b/b-cfg: namespace "team-b" does not allow writes from "team-a"`)

		// team-b's owner allows team-a: the watch re-syncs the waiting
		// ManifestSync, and its target syncs; kube-system still refuses.
		tc.allowFrom(t, "team-b", "team-a")
		eventually(t, timeout, func() error {
			if cm := tc.configMap(t, "team-b", "b-cfg"); cm == nil || cm.Labels[OwnerLabel] != "team-a.cross" {
				return fmt.Errorf("ConfigMap team-b/b-cfg = %v, want it written by team-a/cross", cm)
			}
			return nil
		})
		eventually(t, timeout, func() error {
			got = tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
			if r := row(got, "b"); r.State != v1alpha1.TargetSynced {
				return fmt.Errorf("target b = %+v, want Synced", r)
			}
			return nil
		})
		refused(t, got, "loose", `namespace "kube-system" does not allow writes from "team-a"`)
		tc.absent(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "loose"}})
	})

	// RBAC: a Role and RoleBinding in kube-system that would let the
	// tenant read its Secrets are refused; in a namespace that allows
	// the tenant, a Role or binding may grant only writes (not get, not
	// the view ClusterRole, not create on pods/exec); in its own
	// namespace the API server decides against the operator's rights,
	// which hold no bind or escalate.
	t.Run("RBAC", func(t *testing.T) {
		readSecrets := []map[string]any{roleObj("read-secrets", "get", "list"), bindingObj("read-secrets", "Role", "read-secrets")}
		// A write that is not one: create on pods/exec runs commands in
		// shared's Pods, reading what they hold.
		execRole := map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": map[string]any{"name": "exec"},
			"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods/exec"}, "verbs": []any{"create"}}}}
		tc.create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "reader"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}})
		ms := newSync("team-a", "rbac", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"kube-system": readSecrets,
				"shared":      readSecrets,
				"view":        {bindingObj("view", "ClusterRole", "view")},
				"existing":    {bindingObj("use-reader", "Role", "reader")},
				"writes":      {roleObj("write-configmaps", "create", "update"), bindingObj("write-configmaps", "Role", "write-configmaps")},
				"own":         {bindingObj("admin", "ClusterRole", "cluster-admin")},
				"exec":        {execRole, bindingObj("exec", "Role", "exec")},
			}),
			Targets: []v1alpha1.Target{
				{Name: "kube-system", Namespace: "kube-system"}, {Name: "shared", Namespace: "shared"},
				{Name: "view", Namespace: "shared"}, {Name: "existing", Namespace: "shared"}, {Name: "writes", Namespace: "shared"},
				{Name: "own", Namespace: "team-a"}, {Name: "exec", Namespace: "shared"},
			},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonApplyFailed)
		refused(t, got, "kube-system", `Role kube-system/read-secrets: namespace "kube-system" does not allow writes from "team-a"`,
			`RoleBinding kube-system/read-secrets: namespace "kube-system" does not allow`)
		refused(t, got, "shared", `Role shared/read-secrets: grants "get" in namespace "shared", where ManifestSyncs of "team-a" may only write`,
			`RoleBinding shared/read-secrets: grants "get"`)
		refused(t, got, "view", `RoleBinding shared/view: binds ClusterRole "view", which the operator may not read: what it would grant cannot be checked`)
		refused(t, got, "existing", `RoleBinding shared/use-reader: grants "get"`)
		refused(t, got, "exec", `Role shared/exec: grants "create" on "pods/exec" in namespace "shared", which lets its holder run commands in Pods`,
			"spec.serviceAccountName", "--trusted-namespaces", `RoleBinding shared/exec: grants "create" on "pods/exec"`)
		synced(t, got, "writes")
		if r := row(got, "own"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, "attempting to grant RBAC permissions not currently held") ||
			strings.Contains(r.Message, v1alpha1.ReasonTargetNotAllowed) {
			t.Errorf("own row = %+v, want the API server's escalation check to refuse cluster-admin", r)
		}
		for _, ns := range []string{"kube-system", "shared"} {
			tc.absent(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-secrets"}})
			tc.absent(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read-secrets"}})
		}
		tc.absent(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "view"}})
		tc.absent(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "use-reader"}})
		tc.absent(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "admin"}})
		tc.absent(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "exec"}})
		tc.absent(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "exec"}})
	})

	// Cluster-scoped objects are refused, whatever they are.
	t.Run("cluster-scoped", func(t *testing.T) {
		ms := newSync("team-a", "cluster", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"crb": {{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "team-a-admin"},
					"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
					"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}}}},
				"ns": {{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a-extra"}}},
			}),
			Targets: []v1alpha1.Target{{Name: "crb"}, {Name: "ns"}},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
		refused(t, got, "crb", "ClusterRoleBinding team-a-admin: cluster-scoped objects are written only by ManifestSyncs of trusted namespaces")
		refused(t, got, "ns", "Namespace team-a-extra: cluster-scoped")
		tc.absent(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "team-a-admin"}})
		tc.absent(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a-extra"}})
	})

	// Another team's object, in a namespace both may write, is not taken
	// over (policy Overwrite) by a team that may not write into the
	// owner's namespace; deleting the ManifestSync prunes nothing of it.
	t.Run("overwrite and prune another team's object", func(t *testing.T) {
		theirs := oneTarget(t, "team-c", "app", "shared", "shared", configMapObj("", "team-c-cfg", "theirs"))
		tc.create(t, theirs)
		tc.wait(t, theirs, v1alpha1.ReasonSynced)
		ms := newSync("team-a", "grab", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"shared": {configMapObj("", "team-c-cfg", "mine")},
				"team-c": {configMapObj("", "team-c-own", "mine")},
			}),
			Targets: []v1alpha1.Target{{Name: "shared", Namespace: "shared"}, {Name: "team-c", Namespace: "team-c"}},
			Policy:  v1alpha1.Policy{Resources: v1alpha1.PolicyOverwrite},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
		refused(t, got, "shared", `ConfigMap shared/team-c-cfg: is owned by ManifestSync team-c/app, and namespace "team-c" does not allow writes from "team-a"`)
		refused(t, got, "team-c", `namespace "team-c" does not allow writes from "team-a"`)
		if cm := tc.configMap(t, "shared", "team-c-cfg"); cm == nil || cm.Data["v"] != "theirs" || cm.Labels[OwnerLabel] != "team-c.app" {
			t.Errorf("ConfigMap shared/team-c-cfg = %v, want team-c's, untouched", cm)
		}
		if err := tc.env.Client.Delete(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		eventually(t, timeout, func() error { return tc.env.Gone(ms) })
		if cm := tc.configMap(t, "shared", "team-c-cfg"); cm == nil || cm.Data["v"] != "theirs" {
			t.Errorf("ConfigMap shared/team-c-cfg = %v after team-a's ManifestSync was deleted, want team-c's", cm)
		}
	})

	// An allow-from taken back: what the tenant wrote there is no longer
	// its to delete. Its deletion prunes nothing there (the finalizer is
	// removed after the deletion timeout, with a Warning naming it).
	t.Run("prune after allow-from is taken back", func(t *testing.T) {
		tc.namespace(t, "lent", "team-a")
		ms := oneTarget(t, "team-a", "lent", "lent", "lent", configMapObj("", "borrowed", "1"))
		tc.create(t, ms)
		tc.wait(t, ms, v1alpha1.ReasonSynced)
		tc.allowFrom(t, "lent", "")
		tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
		if err := tc.env.Client.Delete(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
		eventually(t, timeout, func() error { return tc.env.Gone(ms) })
		if cm := tc.configMap(t, "lent", "borrowed"); cm == nil {
			t.Error("ConfigMap lent/borrowed was pruned after namespace lent stopped allowing team-a")
		}
	})

	// A trusted namespace's ManifestSync writes anywhere the operator
	// can: into a namespace that allows nothing; what the operator's own
	// RBAC refuses (a Namespace) the API server refuses, not the gate.
	t.Run("trusted namespace", func(t *testing.T) {
		ms := newSync(operatorNamespace, "platform", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"d":  {configMapObj("", "platform-cfg", "1")},
				"ns": {{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "platform-made"}}},
			}),
			Targets: []v1alpha1.Target{{Name: "d", Namespace: "team-d"}, {Name: "ns"}},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonApplyFailed)
		synced(t, got, "d")
		if r := row(got, "ns"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, "forbidden") || strings.Contains(r.Message, v1alpha1.ReasonTargetNotAllowed) {
			t.Errorf("ns row = %+v, want the API server's Forbidden", r)
		}
		if cm := tc.configMap(t, "team-d", "platform-cfg"); cm == nil {
			t.Error("the trusted ManifestSync did not write ConfigMap team-d/platform-cfg")
		}
	})

	// With spec.serviceAccountName the API server decides: the Role and
	// RoleBinding in kube-system that the gate refused are written once
	// the account may write them (and holds what they grant).
	t.Run("serviceAccountName", func(t *testing.T) {
		grantDeployer(t, tc, "team-a", "kube-system", []rbacv1.PolicyRule{
			{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list"}},
		})
		ms := newSync("team-a", "rbac-as-deployer", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{
				"kube-system": {roleObj("read-secrets", "get", "list"), bindingObj("read-secrets", "Role", "read-secrets")},
				"crb":         {{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "deployer-made"}}},
			}),
			Targets:            []v1alpha1.Target{{Name: "kube-system", Namespace: "kube-system"}, {Name: "crb"}},
			ServiceAccountName: "deployer",
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonApplyFailed)
		synced(t, got, "kube-system")
		if r := row(got, "crb"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `"system:serviceaccount:team-a:deployer"`) {
			t.Errorf("crb row = %+v, want Forbidden to the account", r)
		}
		if err := tc.env.Client.Get(context.Background(), keyOf("kube-system", "read-secrets"), &rbacv1.Role{}); err != nil {
			t.Errorf("Role kube-system/read-secrets: %v", err)
		}
		tc.absent(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "deployer-made"}})
	})

	// With --default-service-account, a ManifestSync without an account
	// runs as that account of its namespace: no gate, the API server
	// decides.
	t.Run("default service account", func(t *testing.T) {
		stop()
		stop = tc.start(t, Options{TrustedNamespaces: []string{operatorNamespace}, DefaultServiceAccount: "deployer"})
		ms := oneTarget(t, "team-b", "as-default", "d", "team-d", configMapObj("", "team-b-cfg", "1"))
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonApplyFailed)
		if r := row(got, "d"); r.State != v1alpha1.TargetFailed || !strings.Contains(r.Message, `"system:serviceaccount:team-b:deployer"`) ||
			strings.Contains(r.Message, v1alpha1.ReasonTargetNotAllowed) {
			t.Errorf("d row = %+v, want Forbidden to team-b's deployer account", r)
		}
		tc.absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: "team-b-cfg"}})
		grantDeployer(t, tc, "team-b", "team-d", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		})
		tc.wait(t, ms, v1alpha1.ReasonSynced)
		if cm := tc.configMap(t, "team-d", "team-b-cfg"); cm == nil {
			t.Error("ConfigMap team-d/team-b-cfg was not written as team-b's deployer")
		}
	})

	// A refused ManifestSync is not retried for an hour here: what wakes
	// it is the watch of the allow-from annotation, on the namespace an
	// object names itself (its target names none).
	t.Run("allow-from wakes the refused", func(t *testing.T) {
		stop()
		stop = tc.start(t, Options{TrustedNamespaces: []string{operatorNamespace}, RetryMin: time.Hour, RetryMax: time.Hour})
		tc.namespace(t, "late", "")
		ms := newSync("team-c", "late", v1alpha1.ManifestSyncSpec{
			Transform: outputs(t, map[string][]map[string]any{"loose": {configMapObj("late", "late-cfg", "1")}}),
			Targets:   []v1alpha1.Target{{Name: "loose"}},
		})
		tc.create(t, ms)
		got := tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
		refused(t, got, "loose", `ConfigMap late/late-cfg: namespace "late" does not allow writes from "team-c"`)
		allowed := time.Now()
		tc.allowFrom(t, "late", "team-b,team-c")
		tc.wait(t, ms, v1alpha1.ReasonSynced)
		t.Logf("synced %v after the annotation", time.Since(allowed).Round(time.Millisecond))
		if cm := tc.configMap(t, "late", "late-cfg"); cm == nil || cm.Labels[OwnerLabel] != "team-c.late" {
			t.Errorf("ConfigMap late/late-cfg = %v, want team-c/late's", cm)
		}
	})
}

// grantDeployer makes the service account deployer of namespace home, if
// it is not there, and grants it rules in namespace in.
func grantDeployer(t *testing.T, tc *tenantCluster, home, in string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "deployer"}}
	if err := tc.env.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	name := "deployer-" + home
	tc.create(t,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: in, Name: name}, Rules: rules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: in, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "deployer"}},
		})
}
