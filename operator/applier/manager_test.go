package applier

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// configMap is a desired ConfigMap of ns.
func configMap(ns, name string, data map[string]any, annotations map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"namespace": ns, "name": name}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}}
}

// manages reports whether manager owns, by apply, a field of obj named f.
func manages(obj metav1.Object, manager, field string) bool {
	for _, e := range obj.GetManagedFields() {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply && e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), field) {
			return true
		}
	}
	return false
}

// TestManagerApply: what Manager.Apply does under each resource policy,
// as the API server decides it, and what a ManifestSync gets of an
// object that is not its own: under Sync a Conflict that writes nothing,
// under Keep nothing written, under Adopt and Overwrite the object.
func TestManagerApply(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := namespace(t)
	m := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app"}

	ch := m.Apply(ctx, configMap(ns, "web", map[string]any{"a": "1"}, nil), "sha256:one")
	if ch.Action != ActionCreated || ch.Err != nil || ch.ResourceVersion == "" || ch.Applied == nil {
		t.Fatalf("first apply: %+v", ch)
	}
	if l := ch.Applied.GetLabels()[OwnerLabel]; l != ns+".app" || ch.Applied.GetAnnotations()[DigestAnnotation] != "sha256:one" || !manages(ch.Applied, FieldManager, "f:a") {
		t.Errorf("applied without our label, digest or fields: %v", ch.Applied.Object["metadata"])
	}
	again := m.Apply(ctx, configMap(ns, "web", map[string]any{"a": "1"}, nil), "sha256:one")
	if again.Action != ActionUnchanged || again.ResourceVersion != ch.ResourceVersion {
		t.Errorf("same object again: %s, version %s then %s", again.Action, ch.ResourceVersion, again.ResourceVersion)
	}
	if changed := m.Apply(ctx, configMap(ns, "web", map[string]any{"a": "2"}, nil), "sha256:two"); changed.Action != ActionConfigured {
		t.Errorf("changed object: %+v", changed)
	}

	// An object of someone else's.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs"}, Data: map[string]string{"a": "theirs"}}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	conflict := m.Apply(ctx, configMap(ns, "theirs", map[string]any{"a": "ours"}, nil), "sha256:x")
	if conflict.Action != ActionConflict || conflict.Err == nil || !strings.Contains(conflict.Err.Error(), "is not managed by this ManifestSync") {
		t.Errorf("Sync over another's object: %+v", conflict)
	}
	kept := m.Apply(ctx, configMap(ns, "theirs", map[string]any{"a": "ours"}, map[string]any{PolicyAnnotation: "Keep"}), "sha256:x")
	if kept.Action != ActionSkipped || kept.Applied != nil {
		t.Errorf("Keep over another's object: %+v", kept)
	}
	live := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), live); err != nil || live.Data["a"] != "theirs" || live.Labels[OwnerLabel] != "" {
		t.Fatalf("another's object after Sync and Keep: %v, %v", live.Data, err)
	}
	adopted := m.Apply(ctx, configMap(ns, "theirs", map[string]any{"a": "ours"}, map[string]any{PolicyAnnotation: "Adopt"}), "sha256:x")
	if adopted.Action != ActionConfigured || adopted.Applied.GetLabels()[OwnerLabel] != ns+".app" {
		t.Errorf("Adopt: %+v", adopted)
	}
	if ours := m.Apply(ctx, configMap(ns, "theirs", map[string]any{"a": "other"}, map[string]any{PolicyAnnotation: "Keep"}), "sha256:y"); ours.Action != ActionUnchanged || ours.Kept == nil || ours.Applied != nil {
		t.Errorf("Keep over our own object: %+v", ours)
	}

	// Overwrite removes the fields another manager set, which Adopt
	// leaves.
	other := configMap(ns, "shared", map[string]any{"a": "1", "b": "2"}, nil)
	if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(other), client.FieldOwner("kubectl")); err != nil {
		t.Fatal(err)
	}
	over := m.Apply(ctx, configMap(ns, "shared", map[string]any{"a": "1"}, map[string]any{PolicyAnnotation: "Overwrite"}), "sha256:z")
	if over.Action != ActionConfigured || over.Err != nil {
		t.Fatalf("Overwrite: %+v", over)
	}
	if data, _, _ := unstructured.NestedStringMap(over.Applied.Object, "data"); len(data) != 1 || data["a"] != "1" {
		t.Errorf("Overwrite left %v, want only a", data)
	}
}

// TestManagerSecretStringData: a Secret's stringData is sent as data, so
// that our field manager owns the data keys the API server keeps (a hand
// edit of data is then a change of our fields).
func TestManagerSecretStringData(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := namespace(t)
	m := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app"}
	desired := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"namespace": ns, "name": "token"}, "stringData": map[string]any{"token": "s3cret"}}}
	ch := m.Apply(ctx, desired, "sha256:engine")
	if ch.Action != ActionCreated {
		t.Fatalf("apply: %+v", ch)
	}
	if !manages(ch.Applied, FieldManager, `"f:data"`) || manages(ch.Applied, FieldManager, "f:stringData") {
		t.Errorf("managed fields %v: want f:data owned, no f:stringData", ch.Applied.GetManagedFields())
	}
	if _, ok := desired.Object["data"]; ok {
		t.Error("the desired object was changed")
	}
	if d := ch.Applied.GetAnnotations()[DigestAnnotation]; d == "sha256:engine" || !strings.HasPrefix(d, "sha256:") {
		t.Errorf("digest annotation %q, want the digest of the object sent", d)
	}
}

// TestManagerDryRunWritesNothing: a dry-run Manager reports what the
// apply would do and leaves the cluster as it was.
func TestManagerDryRunWritesNothing(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := namespace(t)
	m := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app", DryRun: true}
	ch := m.Apply(ctx, configMap(ns, "web", map[string]any{"a": "1"}, nil), "sha256:one")
	if ch.Action != ActionCreated || ch.Applied == nil {
		t.Fatalf("dry run: %+v", ch)
	}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("after a dry run: %v, want NotFound", err)
	}
}

// TestDeleteAndOrphan: Delete prunes an object of ours unless it is
// marked to be kept, or was replaced since it was read; Orphan leaves it
// without our label and digest.
func TestDeleteAndOrphan(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := namespace(t)
	create := func(name string, annotations map[string]string) *metav1.PartialObjectMetadata {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations,
			Labels: map[string]string{OwnerLabel: ns + ".app"}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), meta); err != nil {
			t.Fatal(err)
		}
		return meta
	}
	id := func(name string) v1alpha1.ObjectID {
		return v1alpha1.ObjectID{Namespace: ns, Name: name, Kind: "ConfigMap"}
	}
	exists := func(name string) bool {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		return err == nil
	}

	if deleted, err := Delete(ctx, env.Client, id("gone"), create("gone", nil)); !deleted || err != nil {
		t.Errorf("Delete: %v, %v", deleted, err)
	}
	if deleted, err := Delete(ctx, env.Client, id("kept"), create("kept", map[string]string{PruneAnnotation: PruneDisabled})); deleted || err != nil || !exists("kept") {
		t.Errorf("Delete of a kept object: %v, %v", deleted, err)
	}
	stale := create("replaced", nil)
	if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "replaced"}}); err != nil {
		t.Fatal(err)
	}
	create("replaced", nil) // another object of the same name
	if deleted, err := Delete(ctx, env.Client, id("replaced"), stale); deleted || err != nil || !exists("replaced") {
		t.Errorf("Delete of a replaced object: %v, %v; the new one exists: %v", deleted, err, exists("replaced"))
	}

	orphan := create("orphan", map[string]string{DigestAnnotation: "sha256:x"})
	if err := Orphan(ctx, env.Client, id("orphan"), orphan); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orphan"}, cm); err != nil || cm.Labels[OwnerLabel] != "" || cm.Annotations[DigestAnnotation] != "" {
		t.Errorf("orphaned: labels %v, annotations %v, %v", cm.Labels, cm.Annotations, err)
	}
}

// TestManagerShardLabel: a Manager of a sharded replica writes
// ShardLabel with its ID (one without, none); an apply by another
// replica relabels the object, which is the same object otherwise; the
// dry run of `engine diff` keeps the live label (no change shown), and
// Orphan takes it away with the owner label.
func TestManagerShardLabel(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := namespace(t)
	desired := configMap(ns, "web", map[string]any{"a": "1"}, nil)
	plain := (&Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app"}).Apply(ctx, configMap(ns, "plain", map[string]any{"a": "1"}, nil), "sha256:one")
	if _, ok := plain.Applied.GetLabels()[ShardLabel]; ok || plain.Err != nil {
		t.Errorf("unsharded apply: labels %v, %v", plain.Applied.GetLabels(), plain.Err)
	}
	a := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app", Shard: "a"}
	ch := a.Apply(ctx, desired, "sha256:one")
	if ch.Err != nil || ch.Applied.GetLabels()[ShardLabel] != "a" {
		t.Fatalf("apply of replica a: labels %v, %v", ch.Applied.GetLabels(), ch.Err)
	}
	b := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app", Shard: "b"}
	moved := b.Apply(ctx, desired, "sha256:one")
	if moved.Action != ActionConfigured || moved.Applied.GetLabels()[ShardLabel] != "b" {
		t.Errorf("apply of replica b: %s, labels %v, %v", moved.Action, moved.Applied.GetLabels(), moved.Err)
	}
	if again := b.Apply(ctx, desired, "sha256:one"); again.Action != ActionUnchanged {
		t.Errorf("b's apply again: %s, %v", again.Action, again.Err)
	}
	dry := &Manager{Client: env.Client, Live: env.Client, Owner: ns + ".app", DryRun: true}
	d, err := dryRunObject(ctx, dry, &engine.TargetResult{}, desired, "sha256:one", nil)
	if err != nil || d.Action != ActionUnchanged {
		t.Errorf("dry run of the same object: %s, %v, %v", d.Action, d.Err, err)
	}

	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, meta); err != nil {
		t.Fatal(err)
	}
	if err := Orphan(ctx, env.Client, v1alpha1.ObjectID{Namespace: ns, Name: "web", Kind: "ConfigMap"}, meta); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, cm); err != nil || len(cm.Labels) != 0 {
		t.Errorf("orphaned: labels %v, %v", cm.Labels, err)
	}
}
