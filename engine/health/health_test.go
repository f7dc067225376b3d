package health

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}

const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: web, generation: 2}
spec: {replicas: 3}
`

// widgetCheck judges example.com/v1 Widgets by their phase.
var widgetCheck = v1alpha1.HealthCheck{
	APIVersion: "example.com/v1", Kind: "Widget",
	Current:    `self.status.phase == "Running"`,
	InProgress: `self.status.phase == "Starting"`,
	Failed:     `self.status.phase == "Crashed"`,
}

func TestCheck(t *testing.T) {
	checker, errs := New([]v1alpha1.HealthCheck{widgetCheck})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		name string
		obj  string
		want Status
		msg  string // contained in the message
	}{
		{"deployment available", deployment + `status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, readyReplicas: 3, availableReplicas: 3,
  conditions: [{type: Available, status: "True"}, {type: Progressing, status: "True", reason: NewReplicaSetAvailable}]}`, Current, "available"},
		{"deployment rolling out", deployment + `status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3, readyReplicas: 1, availableReplicas: 1,
  conditions: [{type: Progressing, status: "True", reason: ReplicaSetUpdated}]}`, InProgress, "Available: 1/3"},
		{"deployment generation not observed", deployment + `status: {observedGeneration: 1, replicas: 3, updatedReplicas: 3, readyReplicas: 3, availableReplicas: 3}`, InProgress, "generation"},
		{"deployment past its deadline", deployment + `status: {observedGeneration: 2, replicas: 3, updatedReplicas: 3,
  conditions: [{type: Progressing, status: "False", reason: ProgressDeadlineExceeded, message: 'ReplicaSet "api-5d4" has timed out progressing.'}]}`,
			Failed, `ProgressDeadlineExceeded: ReplicaSet "api-5d4" has timed out progressing.`},
		{"deployment without a status", deployment, InProgress, "Replicas: 0/3"},
		{"configmap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", Current, ""},
		{"being deleted", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, deletionTimestamp: '2026-01-01T00:00:00Z'}\n", Terminating, "deleted"},
		{"custom resource without status or rule", "apiVersion: other.io/v1\nkind: Gadget\nmetadata: {name: g}\nspec: {size: 1}\n", Unknown, "no status"},
		{"custom resource with a Ready condition", "apiVersion: other.io/v1\nkind: Gadget\nmetadata: {name: g}\nstatus: {conditions: [{type: Ready, status: 'False', reason: Waiting, message: 'waiting for db'}]}\n", InProgress, "waiting for db"},
		{"custom resource stalled", "apiVersion: other.io/v1\nkind: Gadget\nmetadata: {name: g}\nstatus: {conditions: [{type: Stalled, status: 'True', reason: Broken, message: 'bad config'}]}\n", Failed, "Broken: bad config"},
		{"rule current", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {phase: Running}\n", Current, "current is true"},
		{"rule in progress", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {phase: Starting}\n", InProgress, "inProgress"},
		{"rule failed, with the object's message", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {phase: Crashed, conditions: [{type: Ready, status: 'False', message: 'out of memory'}]}\n", Failed, "out of memory"},
		{"rule none true", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {phase: Paused}\n", InProgress, "no expression is true"},
		{"rule over a missing field", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", Unknown, "spec.healthChecks[0].failed"},
		{"rule waits for its generation", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, generation: 3}\nstatus: {phase: Running, observedGeneration: 2}\n", InProgress, "generation 3"},
		{"rule of another version does not apply", "apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\n", Unknown, "no status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checker.Check(object(t, tc.obj))
			if got.Status != tc.want || !strings.Contains(got.Message, tc.msg) {
				t.Errorf("Check = %s %q, want %s with %q", got.Status, got.Message, tc.want, tc.msg)
			}
		})
	}
	if got := checker.Check(nil); got.Status != NotFound {
		t.Errorf("Check(nil) = %s, want NotFound", got.Status)
	}
}

func TestNewErrors(t *testing.T) {
	_, errs := New([]v1alpha1.HealthCheck{
		widgetCheck,
		{APIVersion: "example.com/v1", Kind: "Gizmo", Current: `self.status.phase ==`},
		{APIVersion: "example.com/v1", Kind: "Gear", Current: `true`, Failed: `self.status.count + 1`},
		{APIVersion: "example.com/v1", Kind: "Widget", Current: `true`},
		{APIVersion: "a/b/c", Kind: "Bad", Current: `true`},
		{APIVersion: "example.com/v1", Kind: "Cog", Current: ` `},
	})
	want := []string{
		"spec.healthChecks[1].current: ",
		"spec.healthChecks[2].failed: ",
		"spec.healthChecks[3]: example.com/v1 Widget is checked by spec.healthChecks[0] already",
		"spec.healthChecks[4].apiVersion: ",
		"spec.healthChecks[5].current: must be set",
	}
	if len(errs) != len(want) {
		t.Fatalf("errors = %v, want %d", errs, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want it to start with %q", i, errs[i], w)
		}
	}
	if !strings.Contains(errs[1].Error(), "not bool") {
		t.Errorf("a non-boolean expression: %q does not say so", errs[1])
	}
}

func TestAggregate(t *testing.T) {
	r := func(s ...Status) []Result {
		out := make([]Result, len(s))
		for i := range s {
			out[i].Status = s[i]
		}
		return out
	}
	for _, tc := range []struct {
		in   []Result
		want v1alpha1.Health
	}{
		{r(), v1alpha1.HealthHealthy},
		{r(Current, Current), v1alpha1.HealthHealthy},
		{r(Current, InProgress, Unknown), v1alpha1.HealthProgressing},
		{r(Current, NotFound), v1alpha1.HealthUnknown},
		{r(Terminating), v1alpha1.HealthProgressing},
		{r(InProgress, Failed, Unknown), v1alpha1.HealthDegraded},
	} {
		if got := Aggregate(tc.in); got != tc.want {
			t.Errorf("Aggregate(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestNeedsObject(t *testing.T) {
	checker, _ := New([]v1alpha1.HealthCheck{{APIVersion: "v1", Kind: "ConfigMap", Current: "true"}})
	for gvk, want := range map[schema.GroupVersionKind]bool{
		{Version: "v1", Kind: "ConfigMap"}:                                               true, // a rule reads it
		{Version: "v1", Kind: "Secret"}:                                                  false,
		{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}:                false,
		{Group: "apps", Version: "v1", Kind: "Deployment"}:                               true,
		{Version: "v1", Kind: "Service"}:                                                 true, // a LoadBalancer waits for its address
		{Group: "example.com", Version: "v1", Kind: "Widget"}:                            true,
		{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}: true,
	} {
		if got := checker.NeedsObject(gvk); got != want {
			t.Errorf("NeedsObject(%s) = %v, want %v", gvk, got, want)
		}
	}
}

// Judging a kind without a status costs no conversion of the object.
func BenchmarkCheckSecret(b *testing.B) {
	checker, _ := New(nil)
	secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": "n"}, "data": map[string]any{"k": "dmFsdWU="}}}
	for b.Loop() {
		if checker.Check(secret).Status != Current {
			b.Fatal("not Current")
		}
	}
}
