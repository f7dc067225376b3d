package inspect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/applier"
)

// remoteScript makes a ConfigMap "cfg" in every target.
const remoteScript = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "new"}}]
`

// remoteSync is a ManifestSync "app" of home with a target "here" (home)
// and one target per kubeconfig Secret of home named in remotes, each
// "far-SECRET" in the remote cluster's namespace remoteNS.
func remoteSync(home, remoteNS string, remotes ...string) *v1alpha1.ManifestSync {
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: remoteScript}},
			Targets:   []v1alpha1.Target{{Name: "here", Namespace: home}},
		},
	}
	for _, name := range remotes {
		ms.Spec.Targets = append(ms.Spec.Targets, v1alpha1.Target{Name: "far-" + name, Namespace: remoteNS,
			Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: name}}})
	}
	return ms
}

// remoteKubeconfig is an administrator's kubeconfig of the remote cluster,
// for a new user.
func remoteKubeconfig(t *testing.T, user string) []byte {
	t.Helper()
	kc, err := remoteEnv.Kubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// editKubeconfig is kc changed by edit.
func editKubeconfig(t *testing.T, kc []byte, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubeconfigSecrets creates in ns one Secret per name holding its
// kubeconfig (key "value").
func kubeconfigSecrets(t *testing.T, ns string, kubeconfigs map[string][]byte) {
	t.Helper()
	for name, kc := range kubeconfigs {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"value": kc}})
	}
}

// noKubeconfigSecrets fails t when the result shows a credential of a
// kubeconfig, as it is or base64-encoded.
func noKubeconfigSecrets(t *testing.T, got []ObjectDiff, kubeconfigs ...[]byte) {
	t.Helper()
	all, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, kc := range kubeconfigs {
		cfg, err := clientcmd.Load(kc)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range cfg.AuthInfos {
			for _, v := range []string{u.Token, string(u.ClientKeyData), string(u.ClientCertificateData)} {
				if v == "" {
					continue
				}
				if strings.Contains(string(all), v) || strings.Contains(string(all), base64.StdEncoding.EncodeToString([]byte(v))) {
					t.Errorf("the diff shows a kubeconfig credential:\n%s", all)
				}
			}
		}
		if strings.Contains(string(all), base64.StdEncoding.EncodeToString(kc)) {
			t.Errorf("the diff shows a kubeconfig:\n%s", all)
		}
	}
}

// byTarget indexes diffs by "target|object".
func byTarget(got []ObjectDiff) map[string]ObjectDiff {
	out := map[string]ObjectDiff{}
	for _, d := range got {
		out[d.Target+"|"+d.Object] = d
	}
	return out
}

// A target of a remote cluster is dry-run there, with the credentials of
// its kubeconfig Secret: its changed ConfigMap is Configured with the
// diff, as the local target's is Created. What the sync would prune there
// is the inventory's entries of that cluster: an entry of the target that
// the inventory records in this cluster is not looked for in the remote
// one. No credential of the kubeconfig shows.
func TestDiffRemoteTarget(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)
	kc := remoteKubeconfig(t, "admin-"+home)
	kubeconfigSecrets(t, home, map[string][]byte{"remote": kc})
	ms := remoteSync(home, remoteNS, "remote")
	ours := map[string]string{applier.OwnerLabel: home + ".app"}
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "cfg", Labels: ours}, Data: map[string]string{"a": "old"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "old", Labels: ours}, Data: map[string]string{"b": "x"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: remoteNS, Name: "elsewhere", Labels: ours}},
	} {
		if err := remoteEnv.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The live ManifestSync, its inventory in this cluster: "old" in
	// the remote cluster, "elsewhere" in this one (where it is gone).
	live := ms.DeepCopy()
	create(t, live)
	target := "far-remote"
	inv := []v1alpha1.InventoryEntry{
		{ID: v1alpha1.ObjectID{Namespace: remoteNS, Name: "old", Kind: "ConfigMap"}.InventoryID(), Version: "v1", Target: target, Cluster: "remote/value"},
		{ID: v1alpha1.ObjectID{Namespace: remoteNS, Name: "elsewhere", Kind: "ConfigMap"}.InventoryID(), Version: "v1", Target: target},
	}
	if err := live.Status.SetInventory(inv, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, live); err != nil {
		t.Fatal(err)
	}

	got, err := Diff(ctx, env.Client, ms, inProcess{}, "")
	if err != nil {
		t.Fatal(err)
	}
	rows := byTarget(got)
	far := rows[target+"|ConfigMap "+remoteNS+"/cfg"]
	if far.Action != "Configured" || !strings.Contains(far.Unified, "-  a: old") || !strings.Contains(far.Unified, "+  a: new") {
		t.Errorf("remote cfg: %+v\nall: %+v", far, got)
	}
	if here := rows["here|ConfigMap "+home+"/cfg"]; here.Action != "Created" {
		t.Errorf("local cfg: %+v\nall: %+v", here, got)
	}
	if old := rows[target+"|ConfigMap "+remoteNS+"/old"]; old.Action != "Pruned" || !strings.Contains(old.Unified, "-  b: x") {
		t.Errorf("remote old: %+v\nall: %+v", old, got)
	}
	if d, ok := rows[target+"|ConfigMap "+remoteNS+"/elsewhere"]; ok {
		t.Errorf("an inventory entry of this cluster is pruned in the remote one: %+v", d)
	}
	if len(got) != 3 {
		t.Errorf("%d rows, want 3: %+v", len(got), got)
	}
	// Nothing was written there.
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: remoteNS, Name: "cfg"}, cm); err != nil || cm.Data["a"] != "old" {
		t.Errorf("the remote ConfigMap changed: %v %v", cm.Data, err)
	}
	noKubeconfigSecrets(t, got, kc)
}

// A user who may not read a remote target's kubeconfig Secret gets the
// API server's refusal on that target's row only; a kubeconfig that runs
// a plugin is refused (never run), one with a refused token fails its
// own target, and a cluster that never answers fails its target within
// RemoteDiffTimeout: the local target is still compared, and no
// credential shows.
func TestDiffRemoteTargetFailures(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	remoteNS := remoteEnv.Namespace(t, nil)

	// A listener that accepts and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	defer func(r, d time.Duration) { RemoteRequestTimeout, RemoteDiffTimeout = r, d }(RemoteRequestTimeout, RemoteDiffTimeout)
	RemoteRequestTimeout, RemoteDiffTimeout = time.Second, 3*time.Second

	good := remoteKubeconfig(t, "admin-"+home)
	marker := t.TempDir() + "/ran"
	kcs := map[string][]byte{
		"good": good,
		"exec": editKubeconfig(t, good, func(c *clientcmdapi.Config) {
			for _, u := range c.AuthInfos {
				u.ClientCertificateData, u.ClientKeyData = nil, nil
				u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "touch", Args: []string{marker}, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
			}
		}),
		"refused": editKubeconfig(t, good, func(c *clientcmdapi.Config) {
			for _, u := range c.AuthInfos {
				u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, "refused-token-value-4711"
			}
		}),
		"silent": editKubeconfig(t, good, func(c *clientcmdapi.Config) {
			for _, cl := range c.Clusters {
				cl.Server = "https://" + l.Addr().String()
			}
		}),
	}
	kubeconfigSecrets(t, home, kcs)
	ms := remoteSync(home, remoteNS, "good", "exec", "refused", "silent")
	create(t, ms.DeepCopy())

	// bob may apply ConfigMaps and read ManifestSyncs in home, not
	// Secrets.
	create(t,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "bob"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "patch", "update"}},
			{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"manifestsyncs"}, Verbs: []string{"get"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "bob"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "bob"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bob"}},
	)
	bob, err := Diff(ctx, userClient(t, "bob"), ms, inProcess{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if here := byTarget(bob)["here|ConfigMap "+home+"/cfg"]; here.Action != "Created" {
		t.Errorf("bob's local cfg: %+v\nall: %+v", here, bob)
	}
	for _, name := range []string{"good", "exec", "refused", "silent"} {
		d := byTarget(bob)["far-"+name+"|"]
		if d.Action != "Failed" || !strings.Contains(d.Error, `secrets "`+name+`" is forbidden`) || !strings.Contains(d.Error, `User "bob" cannot get resource "secrets"`) {
			t.Errorf("bob's %s row: %+v\nall: %+v", name, d, bob)
		}
	}
	if len(bob) != 5 {
		t.Errorf("bob: %d rows, want 5: %+v", len(bob), bob)
	}
	noKubeconfigSecrets(t, bob, good, kcs["refused"])

	start := time.Now()
	got, err := Diff(ctx, env.Client, ms, inProcess{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > RemoteDiffTimeout+5*time.Second {
		t.Errorf("the diff took %v with a silent cluster", took)
	}
	rows := byTarget(got)
	if d := rows["far-good|ConfigMap "+remoteNS+"/cfg"]; d.Action != "Created" {
		t.Errorf("good: %+v\nall: %+v", d, got)
	}
	if d := rows["here|ConfigMap "+home+"/cfg"]; d.Action != "Created" {
		t.Errorf("here: %+v\nall: %+v", d, got)
	}
	for name, want := range map[string]string{
		"exec":    `cluster "exec": kubeconfig Secret "exec", key "value": the kubeconfig gets its credentials from a plugin`,
		"refused": `cluster "refused": `,
		"silent":  `cluster "silent": `,
	} {
		d := rows["far-"+name+"|"]
		if d.Action != "Failed" || !strings.Contains(d.Error, want) {
			t.Errorf("%s row: %+v, want an error with %q\nall: %+v", name, d, want, got)
		}
	}
	if d := rows["far-refused|"]; !strings.Contains(d.Error, "the server has asked for the client to provide credentials") {
		t.Errorf("refused row: %+v", d)
	}
	if len(got) != 5 {
		t.Errorf("%d rows, want 5: %+v", len(got), got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the kubeconfig's exec plugin ran")
	}
	noKubeconfigSecrets(t, got, good, kcs["refused"])
}
