package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// hookObjs decodes a YAML stream of objects.
func hookObjs(t *testing.T, docs string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for doc := range strings.SplitSeq(docs, "\n---\n") {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%v: %s", err, doc)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// plannedOrder lists a plan's hooks in the order a sync runs them:
// "phase/wave/Kind/name", with the delete policies when policies is set.
func plannedOrder(plan *HookPlan, policies bool) []string {
	var out []string
	for _, phase := range Phases {
		for _, w := range plan.Hooks[phase] {
			for _, h := range w.Hooks {
				s := fmt.Sprintf("%s/%d/%s/%s", phase, w.N, h.Object.GetKind(), HookName(h.Object))
				if policies {
					s += fmt.Sprintf("/%v", h.Hook.DeletePolicies)
				}
				out = append(out, s)
			}
		}
	}
	return out
}

func TestHookOf(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		phases      []HookPhase
		policies    []HookDeletePolicy
		skip        bool
		err         string
	}{
		{name: "ordinary"},
		{name: "argo", annotations: map[string]string{ArgoHookAnnotation: "PostSync, PreSync"},
			phases: []HookPhase{PhasePreSync, PhasePostSync}, policies: []HookDeletePolicy{BeforeHookCreation}},
		{name: "argo wins over helm", annotations: map[string]string{ArgoHookAnnotation: "SyncFail", HelmHookAnnotation: "pre-install"},
			phases: []HookPhase{PhaseSyncFail}, policies: []HookDeletePolicy{BeforeHookCreation}},
		{name: "helm", annotations: map[string]string{HelmHookAnnotation: "pre-install,pre-upgrade", HelmHookDeletePolicyAnnotation: "hook-succeeded,hook-failed"},
			phases: []HookPhase{PhasePreSync}, policies: []HookDeletePolicy{HookSucceeded, HookFailed}},
		{name: "helm post with a delete event", annotations: map[string]string{HelmHookAnnotation: "post-install,post-delete"},
			phases: []HookPhase{PhasePostSync}, policies: []HookDeletePolicy{BeforeHookCreation}},
		{name: "argo policy", annotations: map[string]string{ArgoHookAnnotation: "Sync", ArgoHookDeletePolicyAnnotation: "HookSucceeded"},
			phases: []HookPhase{PhaseSync}, policies: []HookDeletePolicy{HookSucceeded}},
		{name: "skip", annotations: map[string]string{ArgoHookAnnotation: "Skip"}, skip: true},
		{name: "skip with a phase is a hook", annotations: map[string]string{ArgoHookAnnotation: "Skip,PreSync"},
			phases: []HookPhase{PhasePreSync}, policies: []HookDeletePolicy{BeforeHookCreation}},
		{name: "helm test", annotations: map[string]string{HelmHookAnnotation: "test"}, skip: true},
		{name: "helm delete", annotations: map[string]string{HelmHookAnnotation: "pre-delete,post-rollback"}, skip: true},
		{name: "argo delete", annotations: map[string]string{ArgoHookAnnotation: "PostDelete"}, skip: true},
		{name: "helm 2 crd-install is ordinary", annotations: map[string]string{HelmHookAnnotation: "crd-install"}},
		{name: "unknown phase", annotations: map[string]string{ArgoHookAnnotation: "PreSynch"},
			err: `Job web/j: annotation argocd.argoproj.io/hook: "PreSynch" is not one of PostDelete, PostSync, PreDelete, PreSync, Skip, Sync, SyncFail`},
		{name: "unknown event", annotations: map[string]string{HelmHookAnnotation: "pre-instal"},
			err: `Job web/j: annotation helm.sh/hook: "pre-instal" is not one of`},
		{name: "unknown policy", annotations: map[string]string{HelmHookAnnotation: "pre-install", HelmHookDeletePolicyAnnotation: "hook-succeded"},
			err: `Job web/j: annotation helm.sh/hook-delete-policy: "hook-succeded" is not one of before-hook-creation, hook-failed, hook-succeeded`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := waveObj("batch/v1", "Job", "j", "")
			o.SetNamespace("web")
			o.SetAnnotations(c.annotations)
			h, skip, err := HookOf(o)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if skip != c.skip {
				t.Fatalf("skip = %v, want %v", skip, c.skip)
			}
			if c.phases == nil {
				if h != nil {
					t.Fatalf("hook = %+v, want none", h)
				}
				return
			}
			if h == nil || !slices.Equal(h.Phases, c.phases) || !slices.Equal(h.DeletePolicies, c.policies) {
				t.Fatalf("hook = %+v, want phases %v policies %v", h, c.phases, c.policies)
			}
		})
	}
}

// Our wave wins over Argo CD's, Argo CD's over a Helm hook's weight; a
// weight on an object that is no Helm hook means nothing.
func TestWaveOfPrecedence(t *testing.T) {
	cases := []struct {
		annotations map[string]string
		want        int
	}{
		{map[string]string{WaveAnnotation: "3", ArgoWaveAnnotation: "-2"}, 3},
		{map[string]string{ArgoWaveAnnotation: "-2", HelmHookWeightAnnotation: "5", HelmHookAnnotation: "pre-install"}, -2},
		{map[string]string{HelmHookWeightAnnotation: "5", HelmHookAnnotation: "pre-install"}, 5},
		{map[string]string{HelmHookWeightAnnotation: "5"}, 0},
	}
	for _, c := range cases {
		o := waveObj("v1", "ConfigMap", "cm", "")
		o.SetAnnotations(c.annotations)
		if got, err := WaveOf(o); err != nil || got != c.want {
			t.Errorf("WaveOf(%v) = %d, %v; want %d", c.annotations, got, err, c.want)
		}
	}
	o := waveObj("v1", "ConfigMap", "cm", "")
	o.SetAnnotations(map[string]string{ArgoWaveAnnotation: "one"})
	if _, err := WaveOf(o); err == nil || !strings.Contains(err.Error(), `annotation argocd.argoproj.io/sync-wave: "one" is not an integer`) {
		t.Errorf("err = %v", err)
	}
}

// A chart's hooks and an Argo CD set are ordered phase, wave, kind
// (Argo CD's order), name; Skip and Helm's test hooks are never applied;
// Waves keeps the ordinary objects only.
func TestPlanHooks(t *testing.T) {
	objs := hookObjs(t, `apiVersion: v1
kind: ConfigMap
metadata: {name: app}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations: {helm.sh/hook: pre-install,pre-upgrade, helm.sh/hook-weight: "5"}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: migrate
  annotations: {helm.sh/hook: pre-install, helm.sh/hook-weight: "5"}
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: seed-
  annotations: {argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/sync-wave: "-1"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: b-smoke
  annotations: {argocd.argoproj.io/hook: PostSync}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: a-smoke
  annotations: {argocd.argoproj.io/hook: PostSync}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: cleanup
  annotations: {argocd.argoproj.io/hook: SyncFail}
---
apiVersion: v1
kind: Pod
metadata:
  name: test
  annotations: {helm.sh/hook: test}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: skipped
  annotations: {argocd.argoproj.io/hook: Skip}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {argocd.argoproj.io/sync-wave: "2"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: sync-job
  annotations: {argocd.argoproj.io/hook: Sync, argocd.argoproj.io/sync-wave: "2"}`)
	digests := make([]string, len(objs))
	for i := range objs {
		digests[i] = string(rune('a' + i))
	}
	plan, err := PlanHooks(objs, digests)
	if err != nil {
		t.Fatal(err)
	}
	got := plannedOrder(plan, false)
	want := []string{
		"PreSync/-1/Job/seed-",
		"PreSync/5/ServiceAccount/migrate", // Argo CD's kind order: a ServiceAccount before a Job
		"PreSync/5/Job/migrate",
		"Sync/2/Job/sync-job",
		"PostSync/0/Job/a-smoke",
		"PostSync/0/Job/b-smoke",
		"SyncFail/0/Job/cleanup",
	}
	if !slices.Equal(got, want) {
		t.Errorf("hooks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ordinary []string
	for _, o := range plan.Objects {
		ordinary = append(ordinary, o.GetName())
	}
	if !slices.Equal(ordinary, []string{"app", "web"}) || !slices.Equal(plan.Digests, []string{"a", "j"}) {
		t.Errorf("ordinary = %v %v", ordinary, plan.Digests)
	}
	if len(plan.Skipped) != 2 || plan.Skipped[0].GetName() != "test" || plan.Skipped[1].GetName() != "skipped" {
		t.Errorf("skipped = %v", plan.Skipped)
	}
	if plan.Len() != 7 {
		t.Errorf("Len = %d", plan.Len())
	}
	waves, err := Waves(objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(waves) != 2 || len(waves[0].Objects) != 1 || waves[0].Objects[0].GetName() != "app" || waves[1].N != 2 || waves[1].Objects[0].GetName() != "web" {
		t.Errorf("waves = %+v", waves)
	}
	if p, err := PlanHooks(objs[:1], nil); p != nil || err != nil {
		t.Errorf("a set without hooks planned %+v, %v", p, err)
	}
}

// A hook named by its generateName alone passes; an ordinary object so
// named is refused as before, and so is a bad generateName.
func TestNormalizeGeneratedHook(t *testing.T) {
	objs := hookObjs(t, `apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
  annotations: {argocd.argoproj.io/hook: PreSync}
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: Migrate_
  annotations: {helm.sh/hook: pre-install}`)
	if err := normalize(objs[0], "web", BuiltinScope); err != nil {
		t.Fatalf("a generateName hook: %v", err)
	}
	if id := hookID(objs[0]); id.Name != "migrate-*" || id.Namespace != "web" {
		t.Errorf("hookID = %+v", id)
	}
	if err := normalize(objs[1], "web", BuiltinScope); err == nil || !strings.Contains(err.Error(), "Job migrate-*: metadata.name must be set") {
		t.Errorf("an ordinary object with generateName: %v", err)
	}
	if err := normalize(objs[2], "web", BuiltinScope); err == nil || !strings.Contains(err.Error(), `metadata.generateName: "Migrate_" is not valid`) {
		t.Errorf("a bad generateName: %v", err)
	}
	if got := NameHook("migrate-", "sha256:0123456789"); got != "migrate-01234" {
		t.Errorf("NameHook = %q", got)
	}
}

// Two targets of one namespace with the same generateName hook do not
// collide: each sync names the hook of its own target's output; their
// named objects still do.
func TestGeneratedHooksDoNotCollide(t *testing.T) {
	objs := hookObjs(t, `apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
  namespace: web
  annotations: {argocd.argoproj.io/hook: PreSync}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: shared, namespace: web}`)
	a := &TargetResult{Name: "a", Namespace: "web", Objects: objs}
	b := &TargetResult{Name: "b", Namespace: "web", Objects: objs}
	refuseCollisions([]*TargetResult{a, b}, []string{"", ""})
	if len(a.Collisions) != 1 || a.Collisions[0].Object != "ConfigMap web/shared" {
		t.Errorf("collisions %+v, want the ConfigMap's only", a.Collisions)
	}
}

// What `helm template` prints of a chart's hooks (bin/helm, Helm v3, the
// oracle of helm's goldens) plans as Argo CD maps it: pre-install
// and pre-upgrade PreSync, post-install PostSync, hook-weight the wave,
// the test hook never applied. Skipped without bin/helm.
func TestPlanHooksOfHelmTemplate(t *testing.T) {
	helm := filepath.Join("..", "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no bin/helm (make helm): %v", err)
	}
	chart := t.TempDir()
	files := map[string]string{
		"Chart.yaml":                "apiVersion: v2\nname: app\nversion: 0.1.0\n",
		"templates/app.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-app\n",
		"templates/pre.yaml":        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-migrate\n  annotations:\n    \"helm.sh/hook\": pre-install,pre-upgrade\n    \"helm.sh/hook-weight\": \"3\"\n    \"helm.sh/hook-delete-policy\": hook-succeeded\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: m, image: alpine}]\n",
		"templates/sa.yaml":         "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {{ .Release.Name }}-migrate\n  annotations:\n    \"helm.sh/hook\": pre-install\n    \"helm.sh/hook-weight\": \"3\"\n",
		"templates/init.yaml":       "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-init\n  annotations:\n    \"helm.sh/hook\": pre-install\n    \"helm.sh/hook-weight\": \"-5\"\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: i, image: alpine}]\n",
		"templates/post.yaml":       "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}-smoke\n  annotations:\n    \"helm.sh/hook\": post-install\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: s, image: alpine}]\n",
		"templates/tests/test.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Release.Name }}-test\n  annotations:\n    \"helm.sh/hook\": test\nspec:\n  containers: [{name: t, image: alpine}]\n",
	}
	for name, body := range files {
		p := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, helm, "template", "rel", chart).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	plan, err := PlanHooks(hookObjs(t, string(out)), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := plannedOrder(plan, true)
	want := []string{
		"PreSync/-5/Job/rel-init/[BeforeHookCreation]",
		"PreSync/3/ServiceAccount/rel-migrate/[BeforeHookCreation]",
		"PreSync/3/Job/rel-migrate/[HookSucceeded]",
		"PostSync/0/Job/rel-smoke/[BeforeHookCreation]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("helm template's hooks plan as\n%s\nwant\n%s\n(helm printed:\n%s)", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
	if len(plan.Objects) != 1 || plan.Objects[0].GetName() != "rel-app" || len(plan.Skipped) != 1 || plan.Skipped[0].GetName() != "rel-test" {
		t.Errorf("ordinary %v, skipped %v", plan.Objects, plan.Skipped)
	}
}
