package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/operator/controller"
)

// hooksYAML are hooks as a chart and an Argo CD repository write them:
// one named by its generateName, a Helm test Pod, an object Argo CD
// skips.
const hooksYAML = `apiVersion: v1
kind: ConfigMap
metadata:
  generateName: pre-
  annotations: {argocd.argoproj.io/hook: PreSync}
---
apiVersion: v1
kind: Pod
metadata:
  name: test
  annotations: {helm.sh/hook: test}
spec:
  containers: [{name: t, image: registry.invalid/t:1}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: skipped
  annotations: {argocd.argoproj.io/hook: Skip}
`

// engine diff leaves hooks out, as Argo CD's diff does: they run once per
// sync and are never applied as the other objects. A synced repository
// with hooks shows no difference, and the hooks the operator created are
// not "to prune", with or without the ManifestSync in the cluster.
func TestDiffLeavesHooksOut(t *testing.T) {
	env := needCluster(t)
	dir, _ := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap, "hooks.yaml": hooksYAML})
	syncDir(t, env, dir)
	code, stdout, stderr := diff(t, dir)
	if code != 0 || stdout != "" || stderr != "" {
		t.Errorf("in sync: exit %d, stdout %q, stderr %q; want 0 and nothing", code, stdout, stderr)
	}
	// Without the ManifestSync in the cluster, the objects carrying its
	// owner label are the ones to prune: a hook of it is not.
	other, ns2 := newSyncDir(t, env, map[string]string{"web.yaml": webConfigMap})
	hook := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns2, Name: "pre-1a2b3",
		Labels: map[string]string{controller.OwnerLabel: ns2 + ".web", controller.HookLabel: "PreSync"}}}
	if err := env.Client.Create(context.Background(), hook); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = diff(t, other)
	if code != 1 || strings.Contains(stdout, "pre-1a2b3") || !strings.Contains(stdout, "ConfigMap "+ns2+"/web: would be created") {
		t.Errorf("exit %d, want 1 with the ConfigMap to create and no hook to prune:\n%s", code, stdout)
	}
}
