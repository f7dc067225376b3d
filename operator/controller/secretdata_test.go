package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// secretToken is the value the Secret of secretScript writes with
// stringData; secretUser the one it writes in data.
const (
	secretToken = "stringdata-t0ken-value"
	secretUser  = "admin-user"
)

// secretScript makes one Secret "creds": key token in stringData (the
// value of params.token), key user in data.
var secretScript = `
def main(ctx):
    return [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "type": "Opaque",
        "data": {"user": "` + base64.StdEncoding.EncodeToString([]byte(secretUser)) + `"},
        "stringData": {"token": ctx.params["token"]}}]
`

// secretSync is a ManifestSync of secretScript into a new namespace under
// the drift policy, created; it returns it and the namespace.
func secretSync(t *testing.T, name string, policy v1alpha1.DriftPolicy) (*v1alpha1.ManifestSync, string) {
	t.Helper()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, name, v1alpha1.ManifestSyncSpec{
		Transform: inline(secretScript),
		Params:    params(`{"token": "` + secretToken + `"}`),
		Targets:   targets(ns),
		Policy:    v1alpha1.Policy{Drift: policy},
	})
	createSync(t, ms)
	return ms, ns
}

func getSecret(t testing.TB, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), keyOf(ns, name), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// ownedPaths are the fields manager owns in obj by apply, as paths
// ".data.token".
func ownedPaths(t testing.TB, obj metav1.Object, manager string) []string {
	t.Helper()
	var out []string
	for _, e := range obj.GetManagedFields() {
		if !ownEntry(e, manager) || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
			t.Fatal(err)
		}
		set.Leaves().Iterate(func(p fieldpath.Path) { out = append(out, p.String()) })
	}
	return out
}

// wantOwnsData fails t unless our field manager owns both keys of the
// Secret under data and nothing under stringData.
func wantOwnsData(t testing.TB, s *corev1.Secret) {
	t.Helper()
	paths := ownedPaths(t, s, reconciler.Options.fieldManager())
	joined := strings.Join(paths, " ")
	for _, want := range []string{".data.token", ".data.user"} {
		if !strings.Contains(joined, want) {
			t.Errorf("our field manager does not own %s: %v", want, paths)
		}
	}
	if strings.Contains(joined, "stringData") {
		t.Errorf("our field manager owns stringData, which the API server never stores: %v", paths)
	}
}

// noValues fails t when a message of ms's status or events shows a value
// of the Secret, plain or base64.
func noValues(t testing.TB, ms *v1alpha1.ManifestSync, values ...string) {
	t.Helper()
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, c := range got.Status.Conditions {
		texts = append(texts, c.Message)
	}
	for _, r := range got.Status.Targets {
		texts = append(texts, r.Message)
	}
	notes, err := eventNotes(ms)
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, notes...)
	all := strings.Join(texts, "\n")
	for _, v := range values {
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(all, form) {
				t.Errorf("a message shows the Secret value %q: %s", form, all)
			}
		}
	}
}

// eventNotes are the notes of ms's events.
func eventNotes(ms *v1alpha1.ManifestSync) ([]string, error) {
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ms.Namespace)); err != nil {
		return nil, err
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Name == ms.Name && e.Regarding.Kind == v1alpha1.Kind {
			notes = append(notes, e.Note)
		}
	}
	return notes, nil
}

// A Secret applied with stringData is applied with it merged into data:
// our field manager owns the data keys, and a hand edit of one is drift,
// reported under policy Report and corrected under the default policy;
// no message shows a value.
func TestDriftSecretStringData(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	for _, policy := range []v1alpha1.DriftPolicy{v1alpha1.DriftReport, ""} {
		name := "secret-" + strings.ToLower(string(policy))
		if policy == "" {
			name = "secret-correct"
		}
		t.Run(name, func(t *testing.T) {
			ms, ns := secretSync(t, name, policy)
			ready(t, ms)
			s := getSecret(t, ns, "creds")
			if string(s.Data["token"]) != secretToken || string(s.Data["user"]) != secretUser {
				t.Fatalf("Secret data not as desired: keys %d", len(s.Data))
			}
			wantOwnsData(t, s)

			const edited = "edited-by-hand-value"
			s.Data["token"] = []byte(edited)
			if err := env.Client.Update(ctx, s, client.FieldOwner("intruder")); err != nil {
				t.Fatal(err)
			}
			report := policy == v1alpha1.DriftReport
			if report {
				waitEvent(t, ms, EventDriftDetected, "Secret "+ns+"/creds (changed)")
				resync(t, ms, 3)
				quiet(t)
				got := &v1alpha1.ManifestSync{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
					t.Fatal(err)
				}
				if msg := got.Status.Targets[0].Message; !strings.Contains(msg, "drifted") || !strings.Contains(msg, "Secret "+ns+"/creds") {
					t.Errorf("target message %q, want the Secret drifted", msg)
				}
				if inv := entriesOf(t, got); len(inv) != 1 || !inv[0].Drifted || inv[0].Missing {
					t.Errorf("inventory %+v, want the Secret drifted", inv)
				}
				if v := string(getSecret(t, ns, "creds").Data["token"]); v != edited {
					t.Errorf("drift Report corrected the edit: token %q", v)
				}
			} else {
				waitEvent(t, ms, EventDriftCorrected, "Secret "+ns+"/creds (changed)")
				eventually(t, timeout, func() error {
					s := getSecret(t, ns, "creds")
					if v := string(s.Data["token"]); v != secretToken {
						return fmt.Errorf("token %q, want it restored", v)
					}
					return nil
				})
				ready(t, ms)
				wantOwnsData(t, getSecret(t, ns, "creds"))
			}
			noValues(t, ms, secretToken, edited, secretUser)
		})
	}
}

// An unchanged Secret written with stringData is applied once: resyncs
// find it as they left it and send nothing.
func TestSecretStringDataAppliedOnce(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, ns := secretSync(t, "secret-once", "")
	ready(t, ms)
	quiet(t)
	rv := getSecret(t, ns, "creds").ResourceVersion
	resync(t, ms, 3)
	quiet(t)
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if n := d.Count(func(r testenv.Request) bool { return r.Write() && r.Resource == "secrets" }); n != 1 {
		t.Errorf("%v writes of Secrets, want the one apply: %v", n, d)
	}
	if got := getSecret(t, ns, "creds").ResourceVersion; got != rv {
		t.Errorf("the Secret was rewritten: resourceVersion %s -> %s", rv, got)
	}
}

// desiredSecret is the object secretScript makes for namespace ns, as the
// engine outputs it.
func desiredSecret(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata":   map[string]any{"name": "creds", "namespace": ns},
		"data":       map[string]any{"user": base64.StdEncoding.EncodeToString([]byte(secretUser))},
		"stringData": map[string]any{"token": secretToken},
	}}
}

// An operator upgraded over a Secret that its former version applied
// with stringData (our field manager owning f:stringData, the digest
// annotation the engine's digest) applies it once, then owns its data
// keys and leaves it alone.
func TestSecretStringDataUpgrade(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ms, ns := secretSync(t, "secret-upgrade", "")
	ready(t, ms)
	desired := desiredSecret(ns)
	engineDigest := engine.ObjectDigest(desired.Object)
	sent, annotated := ssa.AsApplied(desired, engineDigest)
	if s := getSecret(t, ns, "creds"); s.Annotations[DigestAnnotation] != annotated || annotated == engineDigest {
		t.Fatalf("digest annotation %q, want %q, that of the object sent (not the engine's %q)", s.Annotations[DigestAnnotation], annotated, engineDigest)
	}
	if _, ok := sent.Object["stringData"]; ok || !reflect.DeepEqual(desired, desiredSecret(ns)) {
		t.Fatalf("AsApplied: sent %v, desired now %v", sent.Object, desired.Object)
	}

	// The operator goes away; the Secret is left as the former operator
	// applied it, and the inventory with its owned fields.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = true })
	waitGauge(t, suspendedGauge.WithLabelValues(ms.Namespace, ms.Name), 1)
	old := desired.DeepCopy()
	old.SetLabels(map[string]string{OwnerLabel: ownerValue(ms)})
	old.SetAnnotations(map[string]string{DigestAnnotation: engineDigest})
	manager := reconciler.Options.fieldManager()
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(old), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	s := getSecret(t, ns, "creds")
	if paths := ownedPaths(t, s, manager); !strings.Contains(strings.Join(paths, " "), ".stringData.token") {
		t.Fatalf("the former operator's apply owns %v, want stringData", paths)
	}
	if string(s.Data["token"]) != secretToken {
		t.Fatal("the former operator's apply lost the token")
	}
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		entries, err := cur.InventoryEntries()
		if err != nil || len(entries) != 1 {
			return fmt.Errorf("inventory %+v: %v", entries, err)
		}
		entries[0].Fields = ownedFields(s, manager).String()
		if err := cur.Status.SetInventory(entries, 1<<20); err != nil {
			return err
		}
		return env.Client.Status().Update(ctx, cur)
	})
	quiet(t)
	before, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	corrected := recorded.count(ms, EventDriftCorrected)

	// The upgraded operator starts: it remembers nothing.
	reconciler.states.forget(client.ObjectKeyFromObject(ms))
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = false })
	ready(t, ms)
	quiet(t)
	after, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secretWrites := func(d testenv.Requests) float64 {
		return d.Count(func(r testenv.Request) bool { return r.Write() && r.Resource == "secrets" })
	}
	if n := secretWrites(after.Sub(before)); n != 1 {
		t.Errorf("%v writes of Secrets after the upgrade, want the one apply: %v", n, after.Sub(before))
	}
	s = getSecret(t, ns, "creds")
	wantOwnsData(t, s)
	if s.Annotations[DigestAnnotation] != annotated || string(s.Data["token"]) != secretToken || string(s.Data["user"]) != secretUser {
		t.Errorf("after the upgrade: digest %q (want %q), or data not as desired", s.Annotations[DigestAnnotation], annotated)
	}
	if n := recorded.count(ms, EventDriftCorrected); n != corrected {
		t.Errorf("%d DriftCorrected events after the upgrade: the former apply is not drift", n-corrected)
	}

	// Converged: resyncs and another restart send nothing.
	resync(t, ms, 3)
	reconciler.states.forget(client.ObjectKeyFromObject(ms))
	resync(t, ms, 2)
	quiet(t)
	again, err := env.Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := secretWrites(again.Sub(after)); n != 0 {
		t.Errorf("%v writes of Secrets once converged, want 0", n)
	}
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	if inv := entriesOf(t, got); len(inv) != 1 || inv[0].Drifted || inv[0].Fields != ownedFields(s, manager).String() {
		t.Errorf("inventory %+v, want the Secret's owned fields %s", inv, ownedFields(s, manager))
	}
}
