package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/history"
)

// engineCluster runs the engine with args against the test cluster.
func engineCluster(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	args = append(args, "--kubeconfig", cluster.kubeconfig, "--context", "envtest")
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	t.Logf("engine %s: exit %d\n%s%s", strings.Join(args[:2], " "), code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

// The CLI's side of history and rollback: what it lists and what it
// writes. The operator is suspended for this ManifestSync, so that its
// status stays as the test wrote it; operator/e2e checks that the objects
// follow a rollback.
func TestHistoryAndRollback(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	const (
		c1 = "1111111111111111111111111111111111111111"
		c2 = "2222222222222222222222222222222222222222"
	)
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://example.com/config.git", Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: ns}},
			Suspend: true,
		},
	}
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ms) })

	if code, out, _ := engineCluster(t, "history", "web", "-n", ns); code != 0 || !strings.Contains(out, "no history yet") {
		t.Errorf("empty history: exit %d", code)
	}
	entry := func(rev, commit string) v1alpha1.HistoryEntry {
		return v1alpha1.HistoryEntry{Revision: rev, Result: "Synced", Time: metav1.Unix(1767323045, 0),
			Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + commit}, Params: "sha256:p"}}
	}
	// The operator adds its finalizer meanwhile.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), ms); err != nil {
			return err
		}
		ms.Status.Inputs = &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + c2}, Params: "sha256:p"}
		ms.Status.History = []v1alpha1.HistoryEntry{entry("sha256:2222222222222222", c2), entry("sha256:1111111111111111", c1)}
		return env.Client.Status().Update(ctx, ms)
	}); err != nil {
		t.Fatal(err)
	}

	code, out, _ := engineCluster(t, "history", "web", "-n", ns)
	if code != 0 || !strings.Contains(out, "0  2026-01-02T03:04:05Z  Synced  sha256:222222222222  repo=main@sha1:222222222222") ||
		!strings.Contains(out, "1  2026-01-02T03:04:05Z  Synced  sha256:111111111111  repo=main@sha1:111111111111") {
		t.Errorf("history: exit %d\n%s", code, out)
	}

	code, out, _ = engineCluster(t, "rollback", "web", "-n", ns, "--to", "1")
	if code != 0 || !strings.Contains(out, "source repo: {branch: main} -> {commit: "+c1+"}") {
		t.Errorf("rollback: exit %d\n%s", code, out)
	}
	got := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Commit: c1}) || !strings.Contains(got.Annotations[history.Annotation], `"branch":"main"`) {
		t.Errorf("after the rollback: ref %+v, annotations %v", got.Spec.Sources[0].Git.Ref, got.Annotations)
	}

	code, out, _ = engineCluster(t, "rollback", "web", "-n", ns, "--undo")
	if code != 0 || !strings.Contains(out, "source repo: {commit: "+c1+"} -> {branch: main}") {
		t.Errorf("undo: exit %d\n%s", code, out)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[history.Annotation]; ok || got.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Branch: "main"}) {
		t.Errorf("after the undo: ref %+v, annotations %v", got.Spec.Sources[0].Git.Ref, got.Annotations)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollback", "web", "-n", ns}, "exactly one of --to N and --undo"},
		{[]string{"rollback", "web", "-n", ns, "--to", "0", "--undo"}, "exactly one of --to N and --undo"},
		{[]string{"rollback", "web", "-n", ns, "--to", "7"}, "has no history entry 7: it has 2"},
		{[]string{"rollback", "web", "-n", ns, "--undo"}, "is not rolled back"},
		{[]string{"rollback", "nope", "-n", ns, "--to", "0"}, "ManifestSync " + ns + "/nope not found"},
		{[]string{"history", "nope", "-n", ns}, "ManifestSync " + ns + "/nope not found"},
	} {
		if code, _, stderr := engineCluster(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("engine %v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
