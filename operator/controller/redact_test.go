package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A Secret value never reaches status, events or logs: not through a
// script error that quotes it, nor through an API server error that quotes
// the field it refuses.
func TestSecretValuesNeverReported(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	const value = "Not A Label Value!" // plain text; the API server refuses it as a label
	src := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "db"},
		Data:       map[string][]byte{"password": []byte(value)},
	}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	leaks := []string{value, base64.StdEncoding.EncodeToString([]byte(value))}
	ms := newSync(home, "leak", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "db", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "db"}}},
		Transform: inline(`def main(ctx):
    pw = base64.decode(ctx.sources["db"].object["data"]["password"])
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "labels": {"pw": pw}}}]
`),
		Targets: targets(ns),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonApplyFailed)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "***") {
		t.Errorf("the API server's refusal is not in the condition, masked: %q", msg)
	}
	waitEvent(t, ms, EventSyncFailed, "***")
	checkNoLeak(t, ms, leaks)

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = inline(`def main(ctx):
    return int(base64.decode(ctx.sources["db"].object["data"]["password"]))
`)
	})
	got = waitFor(t, ms, v1alpha1.ReasonEvalFailed)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "invalid literal with base 10: ***") {
		t.Errorf("condition: %q", msg)
	}
	waitEvent(t, ms, EventSyncFailed, "invalid literal with base 10: ***")
	checkNoLeak(t, ms, leaks)
}

// checkNoLeak fails if any of leaks is in ms's status, its events or the
// operator's logs.
func checkNoLeak(t *testing.T, ms *v1alpha1.ManifestSync, leaks []string) {
	t.Helper()
	status, notes := statusAndNotes(t, ms, func(eventsv1.Event) bool { return true })
	for _, leak := range leaks {
		for where, text := range map[string]string{"status": status, "events": notes, "logs": operatorLogs.String()} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows the Secret value %q", where, leak)
			}
		}
	}
}

// statusAndNotes returns ms's status as JSON and the notes of the events
// of its namespace that keep: what its tenant can read of a sync.
func statusAndNotes(t *testing.T, ms *v1alpha1.ManifestSync, keep func(eventsv1.Event) bool) (status, notes string) {
	t.Helper()
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(got.Status)
	if err != nil {
		t.Fatal(err)
	}
	var events eventsv1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace(ms.Namespace)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range events.Items {
		if keep(e) {
			b.WriteString(e.Note + "\n")
		}
	}
	return string(js), b.String()
}
