package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// hookDocs is a set of objects with hooks of both annotation families, as
// a chart and an Argo CD repository write them: an ordinary ConfigMap of
// value v, a PreSync hook named by its generateName, a PostSync hook
// deleted once it succeeded, a Helm pre-install hook (before-hook-creation
// by default), an object Argo CD skips and a Helm test hook.
func hookDocs(v string) []string {
	return []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: \"" + v + "\"}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: pre-\n  annotations: {argocd.argoproj.io/hook: PreSync}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: post\n  annotations: {argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: helm-pre\n  annotations: {helm.sh/hook: \"pre-install,pre-upgrade\"}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: skipped\n  annotations: {argocd.argoproj.io/hook: Skip}\n",
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: test\n  annotations: {helm.sh/hook: test}\nspec:\n  containers: [{name: t, image: registry.invalid/t:1}]\n",
	}
}

// count is how many events of the type the log has of the ConfigMap.
func (r *watchLog) count(typ watch.EventType, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.typ == typ && e.kind == "ConfigMap" && e.name == name {
			n++
		}
	}
	return n
}

// Hooks run once per output of the target: a resync of the same output
// runs none, a new output runs them all again. A generateName hook gets a
// name of the output's digest; HookSucceeded deletes a hook once it
// succeeded, BeforeHookCreation recreates one left by the last output.
// Hooks are in no inventory and never pruned; Skip and Helm test hooks
// are never applied.
func TestHooksRunOncePerOutput(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	seen := watchNamespace(t, ns)
	ms := newSync(home, "hooks", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(hookDocs("1")...),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := ready(t, ms)
	row := targetRow(t, got)
	if row.Hooks == nil || row.Hooks.Phase != "Succeeded" || row.Hooks.Digest == "" {
		t.Fatalf("hooks status %+v", row.Hooks)
	}
	first := row.Hooks.Digest
	pre := engine.NameHook("pre-", first)
	wantNames := []string{"ConfigMap " + ns + "/helm-pre", "ConfigMap " + ns + "/post", "ConfigMap " + ns + "/" + pre}
	if names := slices.Sorted(slices.Values(row.Hooks.Names)); !slices.Equal(names, wantNames) {
		t.Errorf("hook names %q, want %q", names, wantNames)
	}
	cm := mustConfigMap(t, ns, pre)
	if cm.Labels[OwnerLabel] != ownerValue(ms) || cm.Labels[HookLabel] != "PreSync" || cm.Annotations[HookRunAnnotation] != first+";PreSync" {
		t.Errorf("hook %s: labels %v, annotations %v", pre, cm.Labels, cm.Annotations)
	}
	helmUID := mustConfigMap(t, ns, "helm-pre").UID
	for _, name := range []string{"post", "skipped"} {
		if _, err := getConfigMap(ns, name); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s: %v, want it absent", name, err)
		}
	}
	if err := gone(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "test"}}); err != nil {
		t.Errorf("the Helm test hook was applied: %v", err)
	}
	if n := seen.count(watch.Added, "post"); n != 1 {
		t.Errorf("the PostSync hook was created %d times, want 1", n)
	}
	if entries := entriesOf(t, got); len(entries) != 1 || !strings.Contains(entries[0].ID, "_app_") {
		t.Errorf("inventory %+v, want the ordinary ConfigMap only", entries)
	}

	// A resync of the same output runs no hook.
	if _, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: home, Name: "hooks"}}); err != nil {
		t.Fatal(err)
	}
	if n := seen.count(watch.Added, "post"); n != 1 {
		t.Errorf("after a resync, the PostSync hook was created %d times, want 1", n)
	}
	if uid := mustConfigMap(t, ns, "helm-pre").UID; uid != helmUID {
		t.Error("a resync of the same output recreated the Helm hook")
	}

	// A new output: every hook runs again; the generateName hook gets a
	// new name, the one of the first output is left as Argo CD leaves
	// it; BeforeHookCreation recreates the Helm hook.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Transform = objectsOf(hookDocs("2")...) })
	got = ready(t, ms)
	row = targetRow(t, got)
	if row.Hooks == nil || row.Hooks.Digest == first || row.Hooks.Phase != "Succeeded" {
		t.Fatalf("hooks status after a new output %+v", row.Hooks)
	}
	second := engine.NameHook("pre-", row.Hooks.Digest)
	if second == pre {
		t.Fatalf("the generateName hook has the same name %s for two outputs", pre)
	}
	mustConfigMap(t, ns, second)
	mustConfigMap(t, ns, pre)
	if uid := mustConfigMap(t, ns, "helm-pre").UID; uid == helmUID {
		t.Error("the Helm hook was not recreated for the new output (before-hook-creation)")
	}
	if n := seen.count(watch.Added, "post"); n != 2 {
		t.Errorf("the PostSync hook was created %d times over two outputs, want 2", n)
	}
	eventually(t, timeout, func() error {
		return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "post"}})
	})

	// Hooks gone from the output are not pruned; the ordinary object is.
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) {
		ms.Spec.Transform = objectsOf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\n")
	})
	got = ready(t, ms)
	if row := targetRow(t, got); row.Hooks != nil {
		t.Errorf("hooks status %+v for an output without hooks", row.Hooks)
	}
	eventually(t, timeout, func() error {
		return gone(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	})
	for _, name := range []string{pre, second, "helm-pre"} {
		mustConfigMap(t, ns, name)
	}
}

// A hook is a write like any other: a gated ManifestSync's hook into a
// namespace it may not write is refused before anything of its target is
// applied (TargetNotAllowed, naming the hook), and runs once the
// namespace allows it.
func TestHookThroughWriteGate(t *testing.T) {
	env.Need(t)
	tc := startTenantCluster(t)
	tc.namespace(t, "team-a", "")
	tc.namespace(t, "team-b", "")
	tc.start(t, Options{TrustedNamespaces: []string{operatorNamespace}})
	hook := configMapObj("team-b", "pre", "1")
	hook["metadata"].(map[string]any)["annotations"] = map[string]any{"argocd.argoproj.io/hook": "PreSync"}
	ms := newSync("team-a", "hooked", v1alpha1.ManifestSyncSpec{
		Transform: outputs(t, map[string][]map[string]any{"loose": {configMapObj("team-a", "app", "1"), hook}}),
		Targets:   []v1alpha1.Target{{Name: "loose"}},
	})
	tc.create(t, ms)
	got := tc.wait(t, ms, v1alpha1.ReasonTargetNotAllowed)
	refused(t, got, "loose", `ConfigMap team-b/pre: namespace "team-b" does not allow writes from "team-a"`)
	tc.absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "pre"}})
	tc.absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "app"}})

	tc.allowFrom(t, "team-b", "team-a")
	eventually(t, timeout, func() error {
		if cm := tc.configMap(t, "team-b", "pre"); cm == nil || cm.Labels[HookLabel] != "PreSync" {
			return fmt.Errorf("hook team-b/pre = %v, want it created once allowed", cm)
		}
		return nil
	})
	tc.wait(t, ms, v1alpha1.ReasonSynced)
}

// A hook the API server refuses fails the sync as a failed hook does:
// HookFailed naming it, the Sync wave not applied, the SyncFail hook run,
// one Warning event (not one per retry), and the failure counted under
// its reason.
func TestHookRefusedFailsTheSync(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "refused-hook", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  annotations: {argocd.argoproj.io/hook: PreSync}\ndata: {\"bad key!\": x}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cleanup\n  annotations: {argocd.argoproj.io/hook: SyncFail}\n",
		),
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonHookFailed)
	want := "hook PreSync ConfigMap " + ns + "/bad: creating it: "
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, want) || !strings.Contains(msg, "is invalid") {
		t.Errorf("Ready's message %q lacks %q", msg, want)
	}
	if row := targetRow(t, got); row.State != v1alpha1.TargetFailed || row.Hooks == nil || row.Hooks.Phase != "Failed" {
		t.Errorf("row %+v, hooks %+v", row, row.Hooks)
	}
	if _, err := getConfigMap(ns, "app"); !apierrors.IsNotFound(err) {
		t.Errorf("the Sync wave was applied after the PreSync hook failed: %v", err)
	}
	if cm := mustConfigMap(t, ns, "cleanup"); cm.Labels[HookLabel] != "SyncFail" {
		t.Errorf("SyncFail hook labels %v", cm.Labels)
	}
	waitEvent(t, ms, EventSyncFailed, want)
	if _, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: home, Name: ms.Name}}); err == nil {
		t.Error("a resync of a failed hook run returned no error: it would not be retried")
	}
	if n := recorded.count(ms, EventSyncFailed); n != 1 {
		t.Errorf("%d SyncFailed events, want 1: a failed run is reported once", n)
	}
	if n := testutil.ToFloat64(failuresTotal.WithLabelValues(home, ms.Name, "t0", v1alpha1.ReasonHookFailed)); n < 1 {
		t.Errorf("manifestsync_failures_total{reason=HookFailed} = %v", n)
	}
}

// An ordinary object made a hook (annotated PreSync) is recreated as a
// hook (before-hook-creation) and leaves the inventory without being
// pruned.
func TestObjectMadeAHook(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	plain := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: migrate}\n"
	hooked := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: migrate\n  annotations: {argocd.argoproj.io/hook: PreSync}\n"
	app := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\n"
	ms := newSync(home, "made-hook", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(plain, app),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	ready(t, ms)
	before := mustConfigMap(t, ns, "migrate").UID
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Transform = objectsOf(hooked, app) })
	got := ready(t, ms)
	if entries := entriesOf(t, got); len(entries) != 1 || !strings.Contains(entries[0].ID, "_app_") {
		t.Errorf("inventory %+v, want the ordinary ConfigMap only", entries)
	}
	// A pruned hook would be gone after the sync that made it.
	if _, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: home, Name: ms.Name}}); err != nil {
		t.Fatal(err)
	}
	cm := mustConfigMap(t, ns, "migrate")
	if cm.UID == before || cm.Labels[HookLabel] != "PreSync" {
		t.Errorf("the object made a hook: uid %s (was %s), labels %v; want it recreated as a hook", cm.UID, before, cm.Labels)
	}
}

// A kind whose health cannot be judged (a custom resource with no status
// and no rule) neither holds the PostSync hooks back nor keeps a hook of
// it running: as Argo CD counts such a kind healthy.
func TestHooksAndKindsWithoutHealth(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	group := home + ".hooks.example.com"
	hookWidget := fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata:\n  name: after\n  annotations: {argocd.argoproj.io/hook: PostSync}\nspec: {size: 1}\n", group)
	done := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: done\n  annotations: {argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/sync-wave: \"1\"}\n"
	ms := newSync(home, "unjudged", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf(widgetCRD(group), widgetDoc(group, "plain", 0), hookWidget, done),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := ready(t, ms)
	if h := targetRow(t, got).Hooks; h == nil || h.Phase != "Succeeded" {
		t.Fatalf("hooks %+v, want Succeeded", h)
	}
	if cm := mustConfigMap(t, ns, "done"); cm.Labels[HookLabel] != "PostSync" {
		t.Errorf("the PostSync hook of wave 1: labels %v", cm.Labels)
	}
}

// A hook named as an object that is not this ManifestSync's (another
// one's, or nobody's) fails the run naming it: BeforeHookCreation never
// deletes what is not ours.
func TestHookNeverDeletesAnotherObject(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken", Labels: map[string]string{OwnerLabel: "other.app"}}}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "grabber", v1alpha1.ManifestSyncSpec{
		Transform: objectsOf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: taken\n  annotations: {argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: BeforeHookCreation}\n"),
		Targets:   targets(ns),
		Interval:  &metav1.Duration{Duration: time.Hour},
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonHookFailed)
	want := "hook PreSync ConfigMap " + ns + "/taken: it exists and is not a hook of this ManifestSync"
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, want) {
		t.Errorf("Ready's message %q lacks %q", msg, want)
	}
	if cm := mustConfigMap(t, ns, "taken"); cm.UID != theirs.UID || cm.Labels[OwnerLabel] != "other.app" {
		t.Errorf("the other object was replaced: %+v", cm.ObjectMeta)
	}
}
