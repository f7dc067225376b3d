package workloadtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Run(m, &env, testenv.WithWorkloads())) }

// within bounds every wait of these tests.
const within = 60 * time.Second

func labels(name string) map[string]string { return map[string]string{"app": name} }

// podTemplate is a pod of one container; kwok runs no image, so the image
// need not exist.
func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels(name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// waitUntil reads obj again until done finds it as wanted (or fails the
// test after within).
func waitUntil(t *testing.T, obj client.Object, done func() error) {
	t.Helper()
	testenv.Eventually(t, within, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		return done()
	})
}

// podsOf are the pods of the namespace labelled app=name.
func podsOf(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := env.Client.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels(labels(name))); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// runningOnFakeNodes fails the test unless each pod is Running and Ready
// on a node of the test bed.
func runningOnFakeNodes(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if !slices.Contains(env.Nodes, p.Spec.NodeName) {
			t.Errorf("pod %s is on node %q, want one of %v", p.Name, p.Spec.NodeName, env.Nodes)
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			t.Errorf("pod %s is %s, ready %v; want Running and Ready", p.Name, p.Status.Phase, podReady(&p))
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func deploymentCondition(d *appsv1.Deployment, typ appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == typ {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func TestDeploymentBecomesAvailable(t *testing.T) {
	env.Need(t)
	t.Parallel()
	ns := env.Namespace(t, nil)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels("web")},
			Template: podTemplate("web"),
		},
	}
	create(t, d)
	waitUntil(t, d, func() error {
		c := deploymentCondition(d, appsv1.DeploymentAvailable)
		if d.Status.ObservedGeneration != d.Generation || d.Status.AvailableReplicas != 3 || d.Status.UpdatedReplicas != 3 ||
			c == nil || c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Deployment %s/web not available: %+v", ns, d.Status)
		}
		return nil
	})
	pods := podsOf(t, ns, "web")
	if len(pods) != 3 {
		t.Fatalf("%d pods, want 3", len(pods))
	}
	runningOnFakeNodes(t, pods)
}

func TestStatefulSetBecomesReady(t *testing.T) {
	env.Need(t)
	t.Parallel()
	ns := env.Namespace(t, nil)
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels("db")},
			Template: podTemplate("db"),
		},
	}
	create(t, s)
	waitUntil(t, s, func() error {
		st := s.Status
		if st.ObservedGeneration != s.Generation || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 ||
			st.CurrentRevision == "" || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("StatefulSet %s/db not ready: %+v", ns, st)
		}
		return nil
	})
	pods := podsOf(t, ns, "db")
	names := []string{}
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"db-0", "db-1"}) {
		t.Fatalf("pods %v, want db-0 and db-1", names)
	}
	runningOnFakeNodes(t, pods)
}

func TestDaemonSetRunsOnTheFakeNodes(t *testing.T) {
	env.Need(t)
	t.Parallel()
	ns := env.Namespace(t, nil)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels("agent")},
			Template: podTemplate("agent"),
		},
	}
	create(t, ds)
	want := int32(len(env.Nodes))
	waitUntil(t, ds, func() error {
		st := ds.Status
		if st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled != want || st.NumberReady != want ||
			st.NumberAvailable != want || st.UpdatedNumberScheduled != want {
			return fmt.Errorf("DaemonSet %s/agent not ready on %d nodes: %+v", ns, want, st)
		}
		return nil
	})
	pods := podsOf(t, ns, "agent")
	var nodes []string
	for _, p := range pods {
		nodes = append(nodes, p.Spec.NodeName)
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, env.Nodes) {
		t.Fatalf("pods on nodes %v, want one on each of %v", nodes, env.Nodes)
	}
	runningOnFakeNodes(t, pods)
}

func TestJobCompletes(t *testing.T) {
	env.Need(t)
	t.Parallel()
	ns := env.Namespace(t, nil)
	tmpl := podTemplate("batch")
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"},
		Spec:       batchv1.JobSpec{Completions: ptr.To[int32](2), Parallelism: ptr.To[int32](2), Template: tmpl},
	}
	create(t, j)
	waitUntil(t, j, func() error {
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				if j.Status.Succeeded != 2 {
					return fmt.Errorf("Job %s/batch complete with %d succeeded, want 2", ns, j.Status.Succeeded)
				}
				return nil
			}
		}
		return fmt.Errorf("Job %s/batch not complete: %+v", ns, j.Status)
	})
}

// A Deployment whose pods no node fits gets no available pod and, past its
// progress deadline, says so: the scheduler, not only the controllers, runs.
func TestUnschedulableDeploymentExceedsItsDeadline(t *testing.T) {
	env.Need(t)
	t.Parallel()
	ns := env.Namespace(t, nil)
	tmpl := podTemplate("stuck")
	tmpl.Spec.NodeSelector = map[string]string{"testenv.manifestsync.dev/no-such-node": "true"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stuck"},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To[int32](2),
			ProgressDeadlineSeconds: ptr.To[int32](3),
			Selector:                &metav1.LabelSelector{MatchLabels: labels("stuck")},
			Template:                tmpl,
		},
	}
	create(t, d)
	waitUntil(t, d, func() error {
		if d.Status.AvailableReplicas != 0 {
			return fmt.Errorf("Deployment %s/stuck has %d available pods, want none", ns, d.Status.AvailableReplicas)
		}
		c := deploymentCondition(d, appsv1.DeploymentProgressing)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ProgressDeadlineExceeded" {
			return fmt.Errorf("Deployment %s/stuck is not past its deadline: %+v", ns, d.Status.Conditions)
		}
		return nil
	})
	if d.Status.AvailableReplicas != 0 {
		t.Errorf("%d available pods, want none", d.Status.AvailableReplicas)
	}
	pods := podsOf(t, ns, "stuck")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2 (pending)", len(pods))
	}
	for _, p := range pods {
		if err := unschedulable(&p); err != nil {
			t.Error(err)
		}
	}
}

// unschedulable says why the pod is not one the scheduler refused.
func unschedulable(p *corev1.Pod) error {
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		return fmt.Errorf("pod %s is %s on node %q, want Pending on none", p.Name, p.Status.Phase, p.Spec.NodeName)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return nil
		}
	}
	return errors.New("pod " + p.Name + " has no PodScheduled=False Unschedulable condition from the scheduler")
}
