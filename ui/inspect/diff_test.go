package inspect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/applier"
)

// inProcess evaluates in this process, without sources: the tests' stand
// in for cmd/engine's sandboxed Evaluator (tested there).
type inProcess struct{}

func (inProcess) Evaluate(ctx context.Context, _ client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error) {
	return engine.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Name: ms.Name}, engine.Options{})
}

// diffScript makes a ConfigMap "cfg" (whose value "copy" is the Secret's
// value, as a hostile transform may copy it) and a Secret "creds".
const diffScript = `
def main(ctx):
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "new", "copy": "new-secret-value"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"password": "new-secret-value"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh"}, "data": {"k": "v"}},
    ]
`

// What a sync would do now, through engine diff's dry run: a changed
// ConfigMap is Configured with its diff, a changed Secret too with its
// values masked (before and after), a new object Created. Neither the
// Secret's old nor its new value shows anywhere in the result, not even
// where the transform copied it into a ConfigMap.
func TestDiff(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: diffScript}},
			Targets:   []v1alpha1.Target{{Name: "prod", Namespace: ns}},
		},
	}
	ours := map[string]string{applier.OwnerLabel: ns + ".app"}
	create(t,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg", Labels: ours}, Data: map[string]string{"a": "old"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds", Labels: ours}, StringData: map[string]string{"password": "old-secret-value"}},
	)
	got, err := Diff(ctx, env.Client, ms, inProcess{}, "")
	if err != nil {
		t.Fatal(err)
	}
	byObject := map[string]ObjectDiff{}
	for _, d := range got {
		byObject[d.Object] = d
		if d.Target != "prod/"+ns && d.Target != "prod" {
			t.Errorf("%s: target %q", d.Object, d.Target)
		}
	}
	cfg := byObject["ConfigMap "+ns+"/cfg"]
	if cfg.Action != "Configured" || !strings.Contains(cfg.Unified, "-  a: old") || !strings.Contains(cfg.Unified, "+  a: new") {
		t.Errorf("cfg: %s\n%s", cfg.Action, cfg.Unified)
	}
	secret := byObject["Secret "+ns+"/creds"]
	if secret.Action != "Configured" || !strings.Contains(secret.Unified, "-  password: '*** (before)'") || !strings.Contains(secret.Unified, "+  password: '*** (after)'") {
		t.Errorf("creds: %s\n%s", secret.Action, secret.Unified)
	}
	if fresh := byObject["ConfigMap "+ns+"/fresh"]; fresh.Action != "Created" || !strings.Contains(fresh.Unified, "+  k: v") {
		t.Errorf("fresh: %s\n%s", fresh.Action, fresh.Unified)
	}
	all, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"old-secret-value", "new-secret-value"} {
		if strings.Contains(string(all), v) || strings.Contains(string(all), base64.StdEncoding.EncodeToString([]byte(v))) {
			t.Errorf("the diff shows the Secret value %q:\n%s", v, all)
		}
	}

	if _, err := Diff(ctx, env.Client, ms, nil, ""); err == nil {
		t.Error("no evaluator is no error")
	}
}

// A hostile transform that names an object after a Secret's value gets
// it masked in the names and the diffs.
func TestDiffRedactsNames(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "leaked-secret-value"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "leaked-secret-value", "namespace": "no-such-namespace-x"}}]
`}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: ns}},
		},
	}
	got, err := Diff(context.Background(), env.Client, ms, inProcess{}, "")
	text, _ := json.Marshal(got)
	if err != nil {
		text = append(text, err.Error()...)
	}
	if strings.Contains(string(text), "leaked-secret-value") || !strings.Contains(string(text), "ConfigMap "+ns+"/***") {
		t.Errorf("the Secret value shows, or the object is not there masked: %s", text)
	}
}
