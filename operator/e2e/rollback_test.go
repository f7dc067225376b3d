package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/history"
)

// requestSync makes the operator reconcile key at once, as the webhook
// receiver does.
func requestSync(t *testing.T, key types.NamespacedName) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"manifestsync.dev/requested-at":%q}}}`, time.Now().UTC().Format(time.RFC3339Nano))
	ms := &v1alpha1.ManifestSync{}
	ms.Namespace, ms.Name = key.Namespace, key.Name
	if err := env.Client.Patch(context.Background(), ms, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// A rollback to the first of two history entries brings the objects of
// its commit back, and its undo those of the second.
func TestRollback(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	startOperator(t, controller.Options{}, home)
	r := newRepo(t)
	c1 := r.commit(map[string]string{"deploy/web.yaml": configMap("web", "version", "1"), "deploy/old.yaml": configMap("old", "x", "1")})

	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources:  []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: r.URL, Ref: v1alpha1.GitRef{Branch: "main"}, Path: "deploy"}}},
			Targets:  []v1alpha1.Target{{Name: "prod", Namespace: target}},
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
	key := client.ObjectKeyFromObject(ms)
	createSync(t, ms)
	waitFor(t, key, v1alpha1.ReasonSynced)
	eventually(t, timeout, hasData(target, "web", "version", "1"))

	c2 := r.commit(map[string]string{"deploy/web.yaml": configMap("web", "version", "2"), "deploy/new.yaml": configMap("new", "x", "2")})
	requestSync(t, key)
	eventually(t, timeout, hasData(target, "web", "version", "2"))
	eventually(t, timeout, absent(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "old"}}))
	// The objects change before the status that records them: wait for
	// the second history entry. The history lists both, the newest first.
	cur := &v1alpha1.ManifestSync{}
	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		if n := len(cur.Status.History); n != 2 {
			return fmt.Errorf("status.history has %d entries, want 2: %+v", n, cur.Status.History)
		}
		return nil
	})
	var out strings.Builder
	if err := history.Write(&out, cur); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("engine history:\n%s", out.String())
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "0 ") || !strings.Contains(lines[1], "repo=main@sha1:"+c2[:12]) ||
		!strings.HasPrefix(lines[2], "1 ") || !strings.Contains(lines[2], "repo=main@sha1:"+c1[:12]) || !strings.Contains(lines[2], "Synced") {
		t.Errorf("history:\n%s", out.String())
	}

	// Back to the first entry: its objects return, the second's go.
	start := time.Now()
	res, err := history.Rollback(ctx, env.Client, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete() || len(res.Changes) != 1 || res.Changes[0].To.Commit != c1 || res.Changes[0].From.Branch != "main" {
		t.Errorf("rollback: %+v", res)
	}
	eventually(t, timeout, hasData(target, "web", "version", "1"))
	eventually(t, timeout, hasData(target, "old", "x", "1"))
	eventually(t, timeout, absent(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: target, Name: "new"}}))
	t.Logf("rolled back in %v", time.Since(start).Round(time.Millisecond))
	cur = waitFor(t, key, v1alpha1.ReasonSynced)
	if ref := cur.Spec.Sources[0].Git.Ref; ref != (v1alpha1.GitRef{Commit: c1}) {
		t.Errorf("ref after the rollback: %+v", ref)
	}
	if got := cur.Status.Inputs.Sources["repo"]; got != "sha1:"+c1 {
		t.Errorf("inputs.sources.repo = %q, want sha1:%s", got, c1)
	}
	var rec history.Record
	if err := json.Unmarshal([]byte(cur.Annotations[history.Annotation]), &rec); err != nil || rec.Refs["repo"] != (v1alpha1.GitRef{Branch: "main"}) {
		t.Errorf("annotation %s = %q (%v)", history.Annotation, cur.Annotations[history.Annotation], err)
	}
	// The entry rolled back to is recorded again, as the newest.
	if h := cur.Status.History; len(h) != 3 || h[0].Inputs.Sources["repo"] != "sha1:"+c1 {
		t.Errorf("history after the rollback: %+v", h)
	}

	// Undo: the branch again, so the second commit.
	if _, err := history.Undo(ctx, env.Client, key); err != nil {
		t.Fatal(err)
	}
	eventually(t, timeout, hasData(target, "web", "version", "2"))
	eventually(t, timeout, hasData(target, "new", "x", "2"))
	cur = waitFor(t, key, v1alpha1.ReasonSynced)
	if _, ok := cur.Annotations[history.Annotation]; ok || cur.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Branch: "main"}) {
		t.Errorf("after the undo: ref %+v, annotations %v", cur.Spec.Sources[0].Git.Ref, cur.Annotations)
	}
}
