package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A Secret replicated into three namespaces follows its source at once and
// comes back when a copy is deleted.
func TestSecretReplicatedToNamespaces(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	nss := []string{env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)}
	src := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "tls"},
		Data:       map[string][]byte{"tls.crt": []byte("one")},
	}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "tls", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}}},
		Targets: targets(nss...),
	})
	createSync(t, ms)
	got := ready(t, ms)
	for _, ns := range nss {
		secretWith(t, timeout, ms, ns, "one")
	}

	if rev := got.Status.Inputs.Sources["tls"]; rev != "resourceVersion:"+src.ResourceVersion {
		t.Errorf("inputs.sources.tls = %q, want resourceVersion:%s", rev, src.ResourceVersion)
	}
	if len(got.Status.Targets) != 3 {
		t.Fatalf("status.targets: %+v", got.Status.Targets)
	}
	for i, row := range got.Status.Targets {
		if row.State != v1alpha1.TargetSynced || row.Namespace != nss[i] || row.Objects != 1 || row.Cluster != "in-cluster" || row.LastSyncTime == nil {
			t.Errorf("status.targets[%d] = %+v", i, row)
		}
	}
	if len(entriesOf(t, got)) != 3 || ownedEntry(entriesOf(t, got)[0]) != (v1alpha1.InventoryEntry{ID: nss[0] + "_tls__Secret", Version: "v1", Target: "t0"}) {
		t.Errorf("status.inventory = %+v", entriesOf(t, got))
	}
	if got.Status.LastAppliedRevision != got.Status.LastEvaluatedRevision || len(got.Status.History) != 1 || got.Status.LastSuccessfulSyncTime == nil {
		t.Errorf("status: applied %q, evaluated %q, history %+v", got.Status.LastAppliedRevision, got.Status.LastEvaluatedRevision, got.Status.History)
	}
	if n := counterValue(objectsTotal.WithLabelValues(home, "tls", "t0", metricApplied)); n != 1 {
		t.Errorf("objects applied to t0: %v, want 1", n)
	}
	if got.Status.TargetsSummary != "3/3" || !strings.HasPrefix(got.Status.ShortRevision, "sha256:") {
		t.Errorf("summary %q, short revision %q", got.Status.TargetsSummary, got.Status.ShortRevision)
	}
	// The source's kind is watched in its namespace only: the operator
	// holds the metadata of no other namespace's Secrets.
	w := reconciler.watches
	w.mu.Lock()
	_, cached := w.namespaces[home]
	watched := w.started[watchKey{gvk: corev1.SchemeGroupVersion.WithKind("Secret"), namespace: home, purpose: watchSources}]
	_, cachedOther := w.namespaces[nss[0]]
	w.mu.Unlock()
	if !cached || !watched || cachedOther {
		t.Errorf("Secrets of the source's namespace watched: %v (cached %v); a target's namespace cached: %v", watched, cached, cachedOther)
	}

	// The source changes: every copy follows without waiting for the
	// interval.
	src.Data["tls.crt"] = []byte("two")
	if err := env.Client.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, ns := range nss {
		secretWith(t, 2*time.Second-time.Since(start), ms, ns, "two")
	}
	t.Logf("3 copies updated %v after the source", time.Since(start).Round(time.Millisecond))

	// A copy is deleted: drift is corrected.
	gone := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nss[1], Name: "tls"}}
	if err := env.Client.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	secretWith(t, timeout, ms, nss[1], "two")
	t.Logf("deleted copy back after %v", time.Since(start).Round(time.Millisecond))
	waitEvent(t, ms, EventDriftCorrected, "Secret "+nss[1]+"/tls (deleted)")
	if n := counterValue(driftTotal.WithLabelValues(home, "tls", "t1", driftCorrected)); n != 1 {
		t.Errorf("drift corrected in t1: %v, want 1", n)
	}

	if n := counterValue(objectsTotal.WithLabelValues(home, "tls", "t1", metricApplied)); n != 3 {
		t.Errorf("objects applied to t1: %v, want 3 (create, update, drift)", n)
	}
	got = ready(t, ms)
	if len(got.Status.History) != 2 {
		t.Errorf("history: %+v", got.Status.History)
	}
}

func secretWith(t testing.TB, within time.Duration, ms *v1alpha1.ManifestSync, ns, value string) {
	t.Helper()
	eventually(t, within, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "tls"}, s); err != nil {
			return err
		}
		if got := string(s.Data["tls.crt"]); got != value {
			return fmt.Errorf("Secret %s/tls has %q, want %q", ns, got, value)
		}
		if s.Labels[OwnerLabel] != ownerValue(ms) || !strings.HasPrefix(s.Annotations[DigestAnnotation], "sha256:") {
			return fmt.Errorf("Secret %s/tls: labels %v, annotations %v", ns, s.Labels, s.Annotations)
		}
		return nil
	})
}

// An object source in another namespace is read only when it shares
// itself with the ManifestSync's namespace. One that is not shared and one
// that does not exist fail with the same message, which says access was
// refused and how an owner shares an object; one missing in the
// ManifestSync's own namespace says it is not found.
//
// What a hostile tenant gets: "access refused" for any object of another
// namespace it names, whether it exists or not; it cannot probe the
// cluster for what exists.
func TestCrossNamespaceSource(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, other, target := env.Namespace(t, nil), env.Namespace(t, nil), env.Namespace(t, nil)
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "shared"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	sourceOf := func(name, ns, object string) *v1alpha1.ManifestSync {
		t.Helper()
		ms := newSync(home, name, v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "cm", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: object}}},
			Targets: targets(target),
		})
		createSync(t, ms)
		return ms
	}
	ms := sourceOf("cross", other, "shared")
	missing := sourceOf("missing", other, "absent")
	own := sourceOf("own", "", "absent")
	refused := func(ms *v1alpha1.ManifestSync) string {
		t.Helper()
		return condition(waitFor(t, ms, v1alpha1.ReasonSourceFailed), v1alpha1.ConditionReady).Message
	}
	unshared, absent := refused(ms), refused(missing)
	t.Logf("unshared: %s\nmissing: %s", unshared, absent)
	want := fmt.Sprintf(`source "cm": ConfigMap %s/shared: access refused: not found, or not shared with namespace %q (annotation %s)`, other, home, AllowNamespacesAnnotation)
	if !strings.Contains(unshared, want) {
		t.Errorf("an unshared object: %q, want it to contain %q", unshared, want)
	}
	if same := strings.ReplaceAll(absent, other+"/absent", other+"/shared"); same != unshared {
		t.Errorf("a missing object of another namespace: %q; an unshared one: %q; want the same message but for the name", absent, unshared)
	}
	if msg, want := refused(own), fmt.Sprintf("ConfigMap %s/absent not found", home); !strings.Contains(msg, want) {
		t.Errorf("a missing object of its own namespace: %q, want it to contain %q", msg, want)
	}
	if _, err := getConfigMap(target, "shared"); err == nil {
		t.Error("the target got the object")
	}

	src.Annotations = map[string]string{AllowNamespacesAnnotation: "elsewhere, " + home}
	if err := env.Client.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	ready(t, ms)
	configMapWith(t, timeout, ms, target, "shared", "k", "v")
}

// Git sources come through Sources; a kustomize source builds over one.
func TestKustomizeSourceOverGit(t *testing.T) {
	env.Need(t)
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	ms := newSync(home, "kustomize", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://kustomize"}},
			{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", Path: "overlays/prod"}},
		},
		Targets: targets(ns),
	})
	createSync(t, ms)
	got := ready(t, ms)
	configMapWith(t, timeout, ms, ns, "prod-cfg", "env", "base")
	if n := counterValue(gitFetchesTotal.WithLabelValues(home, "kustomize", "repo", "success")); n < 1 {
		t.Errorf("successful git fetches: %v, want at least 1", n)
	}
	if n := seriesWith(t, sourceDuration, prometheus.Labels{"namespace": home, "name": "kustomize"}); n != 1 {
		t.Errorf("%d source duration series, want 1 (the git source; the kustomize source reads nothing)", n)
	}
	if src := got.Status.Inputs.Sources; src["repo"] != "main@sha1:4f2c0000" || src["app"] != "main@sha1:4f2c0000" {
		t.Errorf("inputs.sources = %v", src)
	}
	if len(entriesOf(t, got)) != 1 {
		t.Errorf("inventory %+v: the repository's raw files became objects", entriesOf(t, got))
	}
}

// Without a git provider, a git source fails the sync.
func TestGitSourcesNeedAProvider(t *testing.T) {
	r := &Reconciler{}
	ms := newSync("home", "git", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://git.example.com/x.git"}}},
	})
	_, err := r.fetchSources(context.Background(), ms, &syncState{})
	if err == nil || err.Error() != `source "repo": git sources are not wired yet` {
		t.Errorf("got %v", err)
	}
}

// A git source that cannot be fetched fails the sync, and says so.
func TestGitSourceNotWired(t *testing.T) {
	env.Need(t)
	home := env.Namespace(t, nil)
	ms := newSync(home, "git", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://git.example.com/x.git"}}},
		Targets: targets(home),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonSourceFailed)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, `source "repo": git sources are not wired yet`) {
		t.Errorf("message %q", msg)
	}
	if c := condition(got, v1alpha1.ConditionReconciling); c.Status != metav1.ConditionTrue {
		t.Errorf("Reconciling = %+v, want True (retrying)", c)
	}
	waitEvent(t, ms, EventSyncFailed, "git sources are not wired yet")
	if n := counterValue(gitFetchesTotal.WithLabelValues(home, "git", "repo", "error")); n < 1 {
		t.Errorf("failed git fetches: %v, want at least 1", n)
	}
	if n := counterValue(gitFetchesTotal.WithLabelValues(home, "git", "repo", "success")); n != 0 {
		t.Errorf("successful git fetches: %v, want none", n)
	}
}

// A suspended ManifestSync changes nothing until it is resumed.
func TestSuspend(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "cfg"}, Data: map[string]string{"k": "one"}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "suspend", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "cfg", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg"}}},
		Targets: targets(ns),
	})
	createSync(t, ms)
	ready(t, ms)
	configMapWith(t, timeout, ms, ns, "cfg", "k", "one")

	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = true })
	waitGauge(t, suspendedGauge.WithLabelValues(home, "suspend"), 1) // the operator sees the suspension first
	src.Data["k"] = "two"
	if err := env.Client.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if cm := mustConfigMap(t, ns, "cfg"); cm.Data["k"] != "one" {
		t.Fatalf("a suspended ManifestSync synced: %v", cm.Data)
	}
	updateSync(t, ms, func(ms *v1alpha1.ManifestSync) { ms.Spec.Suspend = false })
	configMapWith(t, timeout, ms, ns, "cfg", "k", "two")
	waitGauge(t, suspendedGauge.WithLabelValues(home, "suspend"), 0)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
