package inspect

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/view"
)

const secretValue = "hunter2-never-shown"

// controlledBy is the controller owner reference to an object.
func controlledBy(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

// workload creates in ns what a synced Deployment "web" leaves in a
// cluster: the Deployment, a ReplicaSet it controls and two Pods of that
// ReplicaSet (no controller manager runs: the test makes them, with their
// owner references), and a Pod of another owner; and a Secret "creds"
// whose value is in its data and in kubectl's last-applied annotation.
func workload(t *testing.T, ns string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
	create(t, dep)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-5d4f", Labels: labels, OwnerReferences: controlledBy("apps/v1", "Deployment", "web", dep.UID)},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
	create(t, rs)
	for _, name := range []string{"web-5d4f-b", "web-5d4f-a"} {
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			OwnerReferences: controlledBy("apps/v1", "ReplicaSet", rs.Name, rs.UID)}, Spec: podSpec})
	}
	create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stranger",
		OwnerReferences: controlledBy("apps/v1", "ReplicaSet", "other", "0000-other")}, Spec: podSpec})
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds", Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"password":"` + secretValue + `"}}`}},
		StringData: map[string]string{"password": secretValue},
	})
}

// syncOf is a ManifestSync of ns whose status lists, in target "prod",
// the objects of entries (gzipped, as the operator writes a large
// inventory).
func syncOf(t *testing.T, ns string, entries ...v1alpha1.InventoryEntry) *v1alpha1.ManifestSync {
	t.Helper()
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	ms.Status.Targets = []v1alpha1.TargetStatus{{Name: "prod", Namespace: ns, State: v1alpha1.TargetSynced, Objects: len(entries)}}
	for i := range entries {
		entries[i].Target = "prod"
	}
	if err := ms.Status.SetInventory(entries, 1); err != nil {
		t.Fatal(err)
	}
	if len(ms.Status.InventoryGzip) == 0 {
		t.Fatal("the inventory is not gzipped")
	}
	return ms
}

func entry(ns, group, version, kind, name string) v1alpha1.InventoryEntry {
	return v1alpha1.InventoryEntry{ID: v1alpha1.ObjectID{Namespace: ns, Name: name, Group: group, Kind: kind}.InventoryID(), Version: version}
}

// nodes are the nodes of every wave of ts, children included, by
// "Kind ns/name", and the wave of each.
func nodes(ts []Target) (map[string]Node, map[string]int) {
	out, waves := map[string]Node{}, map[string]int{}
	var add func(n Node, wave int)
	add = func(n Node, wave int) {
		id := v1alpha1.ObjectID{Namespace: n.Namespace, Name: n.Name, Group: n.Group, Kind: n.Kind}.String()
		out[id], waves[id] = n, wave
		for _, c := range n.Children {
			add(c, wave)
		}
	}
	for _, t := range ts {
		for _, w := range t.Waves {
			for _, n := range w.Nodes {
				add(n, w.Wave)
			}
		}
	}
	return out, waves
}

// The tree of a target: its objects by wave, a Deployment with its
// ReplicaSet and that ReplicaSet's Pods (not another's), each judged; a
// drifted and a missing object as the status says. A hostile user who
// puts a Secret in the inventory gets its values only as ***, also where
// another object holds one, and one who makes a huge object gets its
// YAML cut at MaxYAMLBytes.
func TestTree(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	workload(t, ns)
	create(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg", Annotations: map[string]string{"manifestsync.dev/wave": "2"}}, Data: map[string]string{"a": "b"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "huge"}, Data: map[string]string{"blob": strings.Repeat("x\n", 200<<10)}},
		// A transform may copy a Secret's value into another object.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "copy"}, Data: map[string]string{"url": "https://user:" + secretValue + "@example.com"}},
	)
	drifted := entry(ns, "", "v1", "ConfigMap", "cfg")
	drifted.Drifted = true
	missing := entry(ns, "", "v1", "ConfigMap", "gone")
	missing.Missing = true
	ms := syncOf(t, ns,
		entry(ns, "apps", "v1", "Deployment", "web"),
		entry(ns, "", "v1", "Secret", "creds"),
		drifted, missing,
		entry(ns, "", "v1", "ConfigMap", "huge"),
		entry(ns, "", "v1", "ConfigMap", "copy"),
	)
	ts, err := Tree(ctx, env.Client, ms)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "prod" {
		t.Fatalf("targets %+v", ts)
	}
	if got := len(ts[0].Waves); got != 2 || ts[0].Waves[0].Wave != 0 || ts[0].Waves[1].Wave != 2 {
		t.Errorf("waves %+v, want 0 and 2", ts[0].Waves)
	}
	all, waves := nodes(ts)

	dep := all["Deployment "+ns+"/web"]
	if !dep.Managed || dep.State != view.StateSynced || dep.Health == "" || dep.Error != "" {
		t.Errorf("Deployment %+v", dep)
	}
	if len(dep.Children) != 1 || dep.Children[0].Kind != "ReplicaSet" || dep.Children[0].Managed || dep.Children[0].State != "" {
		t.Fatalf("Deployment's children %+v, want its ReplicaSet", dep.Children)
	}
	rs := dep.Children[0]
	var pods []string
	for _, p := range rs.Children {
		pods = append(pods, p.Name)
		if p.Kind != "Pod" || p.Health == "" || p.YAML == "" {
			t.Errorf("Pod %+v", p)
		}
	}
	if strings.Join(pods, ",") != "web-5d4f-a,web-5d4f-b" {
		t.Errorf("ReplicaSet's Pods %v, want its two, sorted, and not the stranger", pods)
	}

	secret := all["Secret "+ns+"/creds"]
	encoded := base64.StdEncoding.EncodeToString([]byte(secretValue))
	if secret.YAML == "" || strings.Contains(secret.YAML, secretValue) || strings.Contains(secret.YAML, encoded) {
		t.Errorf("the Secret's YAML shows its value:\n%s", secret.YAML)
	}
	if !strings.Contains(secret.YAML, "password: '***'") || !strings.Contains(secret.YAML, "last-applied-configuration: '***'") {
		t.Errorf("the Secret's YAML lacks its masks:\n%s", secret.YAML)
	}
	if strings.Contains(secret.YAML, "managedFields") || strings.Contains(dep.YAML, "managedFields") {
		t.Error("the YAML shows managedFields")
	}

	if cfg := all["ConfigMap "+ns+"/cfg"]; cfg.State != view.StateDrifted || waves["ConfigMap "+ns+"/cfg"] != 2 || cfg.Health != "Current" {
		t.Errorf("cfg %+v in wave %d, want Drifted, Current, in wave 2", cfg, waves["ConfigMap "+ns+"/cfg"])
	}
	if gone := all["ConfigMap "+ns+"/gone"]; gone.State != view.StateMissing || gone.Health != "NotFound" || gone.YAML != "" {
		t.Errorf("gone %+v, want Missing, NotFound, no YAML", gone)
	}
	huge := all["ConfigMap "+ns+"/huge"]
	if len(huge.YAML) > MaxYAMLBytes+100 || !strings.Contains(huge.Note, "cut") || !strings.HasSuffix(huge.YAML, "KiB\n") {
		t.Errorf("huge: %d bytes of YAML, note %q: want it cut at %d", len(huge.YAML), huge.Note, MaxYAMLBytes)
	}
	if c := all["ConfigMap "+ns+"/copy"]; strings.Contains(c.YAML, secretValue) || !strings.Contains(c.YAML, "https://user:***@example.com") {
		t.Errorf("a ConfigMap holding the Secret's value shows it:\n%s", c.YAML)
	}
	if o := ts[0].Objects; len(o) != 6 || o[0].Health == "" {
		t.Errorf("the view's objects %+v lack their health", o)
	}
}

// A user who may read some objects only: what the API server refuses
// shows its message in the node (a forbidden get) or in a note (a
// forbidden list of children); the rest shows. A restricted user never
// gets more than kubectl would give them.
func TestTreeForbidden(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	workload(t, ns)
	const user = "viewer-of-deployments"
	create(t,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployments"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployments"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployments"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}}},
	)
	ms := syncOf(t, ns, entry(ns, "apps", "v1", "Deployment", "web"), entry(ns, "", "v1", "Secret", "creds"))
	c := userClient(t, user)
	var ts []Target
	// The authorizer sees a new RoleBinding within a moment.
	for range 50 {
		var err error
		if ts, err = Tree(ctx, c, ms); err != nil {
			t.Fatal(err)
		}
		if all, _ := nodes(ts); all["Deployment "+ns+"/web"].Error == "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	all, _ := nodes(ts)
	dep := all["Deployment "+ns+"/web"]
	if dep.Error != "" || dep.YAML == "" {
		t.Fatalf("Deployment %+v, want it read", dep)
	}
	if len(dep.Children) != 0 || !strings.Contains(dep.Note, `replicasets.apps is forbidden: User "`+user+`" cannot list resource "replicasets"`) {
		t.Errorf("Deployment's children %v, note %q: want none, and the API server's refusal", dep.Children, dep.Note)
	}
	secret := all["Secret "+ns+"/creds"]
	if !strings.Contains(secret.Error, `secrets "creds" is forbidden: User "`+user+`" cannot get resource "secrets"`) || secret.YAML != "" {
		t.Errorf("Secret %+v: want the API server's refusal and no YAML", secret)
	}
	if secret.Health != "Unknown" {
		t.Errorf("Secret's health %q, want Unknown", secret.Health)
	}
}

// Objects of a remote cluster are not read (their kubeconfig is the
// operator's): a user cannot make the UI read another cluster.
func TestTreeRemote(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}})
	ms := syncOf(t, ns, entry(ns, "", "v1", "ConfigMap", "cfg"))
	ms.Status.Targets[0].Cluster = "edge/kubeconfig"
	ts, err := Tree(context.Background(), env.Client, ms)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := nodes(ts)
	if n := all["ConfigMap "+ns+"/cfg"]; n.Health != "" || n.YAML != "" || n.State != view.StateSynced {
		t.Errorf("remote object %+v: want its state alone", n)
	}
}

// A CronJob's Jobs and their Pods are found two levels down; a
// namespace flooded with more Pods than one list reads (a hostile user
// scaling a Job's parallelism) leaves the rest out with a note, and the
// page still answers.
func TestTreeCronJob(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	podSpec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	cron := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: podSpec}}}},
	}
	create(t, cron)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly-1", OwnerReferences: controlledBy("batch/v1", "CronJob", cron.Name, cron.UID)},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: podSpec}},
	}
	create(t, job)
	// More Pods of the Job than one list reads, created 8 at a time.
	sem, errs := make(chan struct{}, 8), make(chan error, MaxChildren+1)
	for i := range MaxChildren + 1 {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- env.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("nightly-1-%03d", i),
				OwnerReferences: controlledBy("batch/v1", "Job", job.Name, job.UID)}, Spec: podSpec})
		}()
	}
	for range MaxChildren + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ms := syncOf(t, ns, entry(ns, "batch", "v1", "CronJob", "nightly"))
	ts, err := Tree(ctx, env.Client, ms)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := nodes(ts)
	c := all["CronJob "+ns+"/nightly"]
	if len(c.Children) != 1 || c.Children[0].Name != "nightly-1" {
		t.Fatalf("CronJob's children %+v, want its Job", c.Children)
	}
	j := c.Children[0]
	if len(j.Children) != MaxChildren || !strings.Contains(j.Note, fmt.Sprintf("only the first %d Pods of namespace %s were listed", MaxChildren, ns)) {
		t.Errorf("Job: %d Pods, note %q: want %d and a note", len(j.Children), j.Note, MaxChildren)
	}
}
