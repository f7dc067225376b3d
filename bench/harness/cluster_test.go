package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/testenv"
)

// With the workload test bed, a Deployment of the benchmark's cluster
// becomes Available.
func TestClusterWorkloadsRollOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c, err := StartCluster(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	nodes, err := c.StartWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) == 0 {
		t.Fatal("no fake nodes")
	}
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sel := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
			},
		},
	}
	if err := cl.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 2 {
			return fmt.Errorf("Deployment default/web: %d of 2 replicas available", d.Status.AvailableReplicas)
		}
		return nil
	})
}
