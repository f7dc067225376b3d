package rollout

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// objectsOf is a transform returning the YAML documents.
func objectsOf(docs ...string) *v1alpha1.Transform {
	src := strings.Join(docs, "\n---\n")
	return &v1alpha1.Transform{Starlark: &v1alpha1.ProgramRef{Inline: "def main(ctx):\n    return yaml.decode_all(" + strconv.Quote(src) + ")\n"}}
}

// jobDoc is a Job with annotations (a YAML flow map's entries); its pod
// runs on kwok's Nodes and completes at once, or, with nodeSelector set,
// is never scheduled. extra is added to the Job's spec.
func jobDoc(name, annotations, nodeSelector, extra string) string {
	meta := "name: " + name
	if strings.HasSuffix(name, "-") {
		meta = "generateName: " + name
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  %s
  annotations: {%s}
spec:
  backoffLimit: 0
  %s
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {%s}
      containers: [{name: job, image: registry.invalid/job:1}]
`, meta, annotations, extra, nodeSelector)
}

func configMapDoc(name, annotations string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  annotations: {%s}\n", name, annotations)
}

func serviceAccountDoc(name string) string {
	return "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: " + name + "}\n"
}

// objectDoc is an object of kind with annotations (a YAML flow map's
// entries) and the top-level fields rest.
func objectDoc(apiVersion, kind, name, annotations, rest string) string {
	return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n  annotations: {%s}\n%s", apiVersion, kind, name, annotations, rest)
}

// webDoc is a Deployment of one replica, which kwok makes available.
func webDoc(annotations string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations: {%s}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: app, image: registry.invalid/app:1}]
`, annotations)
}

// creations records the order in which objects of some kinds are created
// in a namespace, as the API server orders them (resourceVersion), and
// their deletions.
type creations struct {
	mu      sync.Mutex
	created []seen
	deleted []string
	errs    []string
}

type seen struct {
	what string // "Job web-1/db-init"
	rv   int64
}

var watchedKinds = []schema.GroupVersionKind{
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Version: "v1", Kind: "Service"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
}

func watchCreations(t *testing.T, ns string) *creations {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	rec := &creations{}
	for _, gvk := range watchedKinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := wc.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		w, err := wc.Watch(context.Background(), list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				rec.mu.Lock()
				switch obj, _ := e.Object.(*metav1.PartialObjectMetadata); {
				case e.Type == watch.Error || obj == nil:
					rec.errs = append(rec.errs, fmt.Sprintf("%+v", e.Object))
				case e.Type == watch.Added && obj.Name != "kube-root-ca.crt" && obj.Name != "default":
					rv, _ := strconv.ParseInt(obj.ResourceVersion, 10, 64)
					rec.created = append(rec.created, seen{what: gvk.Kind + " " + obj.Name, rv: rv})
				case e.Type == watch.Deleted:
					rec.deleted = append(rec.deleted, gvk.Kind+" "+obj.Name)
				}
				rec.mu.Unlock()
			}
		}()
	}
	return rec
}

// order is what was created, in the API server's order.
func (c *creations) order(t *testing.T) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		t.Fatalf("a watch failed: %s", c.errs)
	}
	s := slices.Clone(c.created)
	slices.SortFunc(s, func(a, b seen) int { return int(a.rv - b.rv) })
	out := make([]string, len(s))
	for i, e := range s {
		out[i] = e.what
	}
	return out
}

func (c *creations) wasDeleted(what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.deleted, what)
}

// hookSync is a ManifestSync of one target in ns, its objects docs.
func hookSync(ns, name string, timeout time.Duration, docs ...string) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ManifestSyncSpec{
			Transform: objectsOf(docs...),
			Targets:   []v1alpha1.Target{{Name: "app", Namespace: ns}},
			Interval:  &metav1.Duration{Duration: time.Hour},
			Timeout:   &metav1.Duration{Duration: timeout},
		},
	}
}

// A chart's hook Jobs (pre-install and post-install, with weights) and an
// Argo CD repository's hooks (PreSync, Sync, PostSync, SyncFail) and
// ordinary objects of several kinds in waves -1..2 run with
// kube-controller-manager's Jobs: a watcher sees hooks and ordinary
// objects alike created phase by phase, wave by wave, in Argo CD's kind
// order (where it differs from the engine's: a Secret before a
// ConfigMap, a ConfigMap before a Role, a Job before a CronJob), then by
// name; each hook after the wave before it completed, PostSync once the
// Deployment and the Job are done. hook-succeeded and HookSucceeded hooks
// are deleted after they succeed; SyncFail hooks do not run.
func TestHookOrder(t *testing.T) {
	env.Need(t)
	chartNS, argoNS := env.Namespace(t, nil), env.Namespace(t, nil)
	chartSeen, argoSeen := watchCreations(t, chartNS), watchCreations(t, argoNS)
	chart := hookSync(chartNS, "chart", within,
		serviceAccountDoc("app"),
		configMapDoc("app-config", ""),
		webDoc(""),
		jobDoc("db-init", `helm.sh/hook: pre-install, helm.sh/hook-weight: "-5"`, "", ""),
		configMapDoc("pre-config", `helm.sh/hook: pre-install, helm.sh/hook-weight: "0"`),
		jobDoc("db-migrate", `helm.sh/hook: "pre-install,pre-upgrade", helm.sh/hook-weight: "0", helm.sh/hook-delete-policy: "before-hook-creation,hook-succeeded"`, "", ""),
		jobDoc("smoke", `helm.sh/hook: post-install, helm.sh/hook-weight: "1"`, "", ""),
		jobDoc("notify", `helm.sh/hook: post-install, helm.sh/hook-weight: "0"`, "", ""),
	)
	argo := hookSync(argoNS, "argo", within,
		jobDoc("seed-", `argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/sync-wave: "-1"`, "", ""),
		jobDoc("pre-b", `argocd.argoproj.io/hook: PreSync`, "", ""),
		jobDoc("pre-a", `argocd.argoproj.io/hook: PreSync`, "", ""),
		objectDoc("rbac.authorization.k8s.io/v1", "Role", "app", `argocd.argoproj.io/sync-wave: "-1"`, "rules: []\n"),
		configMapDoc("cm-early", `argocd.argoproj.io/sync-wave: "-1"`),
		objectDoc("v1", "Secret", "token", `argocd.argoproj.io/sync-wave: "-1"`, "stringData: {k: v}\n"),
		objectDoc("v1", "ServiceAccount", "app", `argocd.argoproj.io/sync-wave: "-1"`, ""),
		objectDoc("batch/v1", "CronJob", "nightly", "", `spec:
  schedule: "0 3 * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: job, image: registry.invalid/job:1}]
`),
		jobDoc("batch", "", "", ""),
		webDoc(""),
		objectDoc("v1", "Service", "web", "", "spec: {selector: {app: web}, ports: [{port: 80}]}\n"),
		configMapDoc("cm-b", `argocd.argoproj.io/sync-wave: "1"`),
		jobDoc("sync-hook", `argocd.argoproj.io/hook: Sync, argocd.argoproj.io/sync-wave: "1"`, "", ""),
		configMapDoc("cm-a", `argocd.argoproj.io/sync-wave: "1"`),
		objectDoc("rbac.authorization.k8s.io/v1", "Role", "late", `argocd.argoproj.io/sync-wave: "2"`, "rules: []\n"),
		configMapDoc("cm-late", `argocd.argoproj.io/sync-wave: "2"`),
		jobDoc("post", `argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded`, "", ""),
		jobDoc("on-fail", `argocd.argoproj.io/hook: SyncFail`, "", ""),
	)
	start := time.Now()
	env.CreateSync(t, chart, within)
	env.CreateSync(t, argo, within)
	gotChart := env.WaitForReason(t, client.ObjectKeyFromObject(chart), v1alpha1.ReasonSynced, within)
	gotArgo := env.WaitForReason(t, client.ObjectKeyFromObject(argo), v1alpha1.ReasonSynced, within)
	t.Logf("both Ready after %s", time.Since(start).Round(time.Millisecond))

	want := []string{"Job db-init", "ConfigMap pre-config", "Job db-migrate", "ServiceAccount app", "ConfigMap app-config", "Deployment web", "Job notify", "Job smoke"}
	if got := chartSeen.order(t); !slices.Equal(got, want) {
		t.Errorf("the chart's objects were created in the order\n%q\nwant\n%q", got, want)
	}
	seedName := "seed-" + strings.TrimPrefix(gotArgo.Status.Targets[0].Hooks.Digest, "sha256:")[:5]
	want = []string{
		"Job " + seedName, "Job pre-a", "Job pre-b", // PreSync: wave -1, wave 0
		"ServiceAccount app", "Secret token", "ConfigMap cm-early", "Role app", // wave -1
		"Service web", "Deployment web", "Job batch", "CronJob nightly", // wave 0
		"ConfigMap cm-a", "ConfigMap cm-b", "Job sync-hook", // wave 1, its Sync hook last
		"ConfigMap cm-late", "Role late", // wave 2
		"Job post", // PostSync
	}
	if got := argoSeen.order(t); !slices.Equal(got, want) {
		t.Errorf("the Argo CD set was created in the order\n%q\nwant\n%q", got, want)
	}
	for _, c := range []struct {
		seen *creations
		what string
	}{{chartSeen, "Job db-migrate"}, {argoSeen, "Job post"}} {
		testenv.Eventually(t, within, func() error {
			if !c.seen.wasDeleted(c.what) {
				return fmt.Errorf("%s was not deleted after it succeeded", c.what)
			}
			return nil
		})
	}
	for _, ms := range []*v1alpha1.ManifestSync{gotChart, gotArgo} {
		if h := ms.Status.Targets[0].Hooks; h == nil || h.Phase != "Succeeded" {
			t.Errorf("%s: hooks %+v", ms.Name, h)
		}
	}
}

// A PreSync hook Job that fails leaves the Sync wave unapplied, fails the
// sync with reason HookFailed and the Job's own message, and runs the
// SyncFail hook.
func TestHookFailed(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	seen := watchCreations(t, ns)
	// Its pod is never scheduled: the Job controller fails it at its
	// deadline, with its message.
	ms := hookSync(ns, "failing", within,
		jobDoc("migrate", `argocd.argoproj.io/hook: PreSync`, "no-such-label: x", "activeDeadlineSeconds: 2"),
		configMapDoc("app", ""),
		jobDoc("cleanup", `argocd.argoproj.io/hook: SyncFail`, "", ""),
	)
	env.CreateSync(t, ms, within)
	got := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonHookFailed, within)
	msg := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady).Message
	want := "hook PreSync Job " + ns + "/migrate failed: DeadlineExceeded: Job was active longer than specified deadline"
	if !strings.Contains(msg, want) {
		t.Errorf("Ready's message %q lacks %q", msg, want)
	}
	row := got.Status.Targets[0]
	if row.State != v1alpha1.TargetFailed || row.Hooks == nil || row.Hooks.Phase != "Failed" || !strings.Contains(row.Hooks.Message, want) {
		t.Errorf("row %+v, hooks %+v", row, row.Hooks)
	}
	testenv.Eventually(t, within, func() error {
		if !slices.Contains(seen.order(t), "Job cleanup") {
			return fmt.Errorf("the SyncFail hook was not created: %q", seen.order(t))
		}
		return nil
	})
	if got := seen.order(t); slices.Contains(got, "ConfigMap app") {
		t.Errorf("the Sync wave was applied after the PreSync hook failed: %q", got)
	}
}

// A hook Job that never finishes fails the sync at spec.timeout, naming
// it; while it waits, the operator (one worker) syncs another
// ManifestSync at once: waiting for a hook is a requeue, not a worker
// held.
func TestHookTimeout(t *testing.T) {
	env.Need(t)
	ns, other := env.Namespace(t, nil), env.Namespace(t, nil)
	const timeout = 20 * time.Second
	ms := hookSync(ns, "stuck", timeout,
		jobDoc("stuck", `argocd.argoproj.io/hook: PreSync`, "no-such-label: x", ""),
		configMapDoc("app", ""),
	)
	start := time.Now()
	env.CreateSync(t, ms, within)
	waiting := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonProgressing, within)
	if msg := apimeta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "PreSync hooks: waiting for hook PreSync Job "+ns+"/stuck") {
		t.Errorf("Ready's message while the hook runs: %q", msg)
	}
	bystander := hookSync(other, "bystander", within, configMapDoc("app", ""))
	created := time.Now()
	env.CreateSync(t, bystander, within)
	env.WaitForReason(t, client.ObjectKeyFromObject(bystander), v1alpha1.ReasonSynced, within)
	readyIn, readyAt := time.Since(created), time.Since(start)
	got := env.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonHookFailed, within)
	failedIn := time.Since(start)
	if readyAt >= failedIn-time.Second {
		// A worker held by the hook would sync the bystander only once
		// the hook failed.
		t.Errorf("the bystander was Ready %s after the hooked sync began, when its hook failed (%s): held up by it", readyAt, failedIn)
	}
	msg := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady).Message
	if want := "hook PreSync Job " + ns + "/stuck failed: did not finish within 20s (spec.timeout)"; !strings.Contains(msg, want) {
		t.Errorf("Ready's message %q lacks %q", msg, want)
	}
	// The hook's creation time is cut to the second.
	if failedIn < timeout-time.Second {
		t.Errorf("HookFailed after %s, before the timeout of %s", failedIn, timeout)
	}
	t.Logf("the bystander was Ready %s after its creation, while the hook waited; HookFailed after %s", readyIn.Round(time.Millisecond), failedIn.Round(time.Millisecond))
}
