package controller

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/internal/fluxoracle"
)

// The flux-layout example's repository, served by a git daemon, syncs as
// Flux applies it: the objects in the API server carry every field of
// what Flux's own library renders (kustomize build, then substitution
// from the namespace's cluster-vars ConfigMap and cluster-secrets
// Secret). A change of cluster-vars is a new revision of the source and
// syncs again at once: the ManifestSync's interval is an hour, so only
// the watch of the ConfigMap can wake it.
func TestFluxLayoutSyncsAsFlux(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	cache := gitOperator(t, git.Options{})
	ns := remoteEnv.Namespace(t, nil)
	content, url, vars, secrets := fluxLayoutRepo(t, ns)
	hour := metav1.Duration{Duration: time.Hour}
	ms := newSync(ns, "podinfo", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: url}},
			{Name: "podinfo", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", Path: "overlays/staging", SubstituteFrom: []v1alpha1.SubstituteReference{
				{Kind: "ConfigMap", Name: "cluster-vars"}, {Kind: "Secret", Name: "cluster-secrets"},
			}}},
		},
		Interval: &hour,
		Targets:  targets(ns),
	})
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndSweep(t, cache, []*v1alpha1.ManifestSync{ms}) })
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, time.Minute)
	rev := got.Status.Inputs.Sources["podinfo"]
	if !strings.HasPrefix(rev, "refs:sha256:") || !strings.HasSuffix(rev, "@"+got.Status.Inputs.Sources["repo"]) {
		t.Errorf("the kustomize source's revision %q: want the refs' digest, then the commit", rev)
	}

	inFluxRender(ctx, t, filepath.Join(content, "overlays", "staging"), ns, vars, secrets)

	// A new value of cluster-vars: synced again without waiting for the
	// interval.
	eventually(t, timeout, func() error {
		cur := &corev1.ConfigMap{}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(vars), cur); err != nil {
			return err
		}
		cur.Data["cluster_env"] = "qa"
		return remoteEnv.Client.Update(ctx, cur)
	})
	start := time.Now()
	eventually(t, timeout, func() error {
		cm := &corev1.ConfigMap{}
		if err := remoteEnv.Client.Get(ctx, keyOf(ns, "settings"), cm); err != nil {
			return err
		}
		if cm.Data["environment"] != "qa" || cm.Data["domain"] != "podinfo.qa.example.com" {
			return fmt.Errorf("settings %v, want environment qa", cm.Data)
		}
		return nil
	})
	t.Logf("a change of cluster-vars synced in %s", time.Since(start).Round(time.Millisecond))
	// The status follows the apply: the new revision shows once it lands.
	eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
			return err
		}
		if cur.Status.Inputs == nil || cur.Status.Inputs.Sources["podinfo"] == rev {
			return fmt.Errorf("the revision %q did not change with cluster-vars", rev)
		}
		return nil
	})
}

// fluxLayoutRepo serves the flux-layout example's repository, its staging
// overlay in namespace ns, from a git daemon, and creates the
// cluster-vars ConfigMap and cluster-secrets Secret it reads there.
func fluxLayoutRepo(t *testing.T, ns string) (content, url string, vars *corev1.ConfigMap, secrets *corev1.Secret) {
	t.Helper()
	content = t.TempDir()
	if err := os.CopyFS(content, os.DirFS(filepath.Join("..", "..", "examples", "flux-layout", "repo"))); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(content, "overlays", "staging", "kustomization.yaml")
	b, err := os.ReadFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(overlay, []byte(strings.Replace(string(b), "namespace: staging", "namespace: "+ns, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	gittest.Publish(t, root, "fleet", content)
	url = gittest.Daemon(t, root) + "/fleet.git"

	vars = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-vars"},
		Data: map[string]string{"cluster_env": "staging", "cluster_region": "eu-west-1", "replicas": "3"}}
	secrets = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-secrets"},
		Data: map[string][]byte{"db_password": []byte("a-database-password")}}
	for _, obj := range []client.Object{vars.DeepCopy(), secrets.DeepCopy()} {
		if err := remoteEnv.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return content, url, vars, secrets
}

// inFluxRender checks that the API server holds every object Flux's own
// library renders of the overlay dir in namespace ns, with every field.
func inFluxRender(ctx context.Context, t *testing.T, dir, ns string, vars *corev1.ConfigMap, secrets *corev1.Secret) {
	t.Helper()
	want, err := fluxoracle.Render(dir, ns, vars, secrets)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 5 {
		t.Fatalf("Flux renders %d objects, want the example's 5", len(want))
	}
	for key, y := range want {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(y), &obj); err != nil {
			t.Fatal(err)
		}
		if err := inAPIServer(ctx, obj); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// Flux's own form syncs the same: a git source at the overlay's path
// (whose ../../base is elsewhere in the repository), built in the whole
// repository at the commit and substituted, as a Flux Kustomization's
// spec.path over its GitRepository. The revision is the refs' digest,
// then the commit.
func TestFluxPathSyncsAsFlux(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	cache := gitOperator(t, git.Options{})
	ns := remoteEnv.Namespace(t, nil)
	content, url, vars, secrets := fluxLayoutRepo(t, ns)
	ms := newSync(ns, "podinfo", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "podinfo", Git: &v1alpha1.GitSource{URL: url, Path: "overlays/staging", Build: v1alpha1.Build{
			SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "ConfigMap", Name: "cluster-vars"}, {Kind: "Secret", Name: "cluster-secrets"}},
		}}}},
		Targets: targets(ns),
	})
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAndSweep(t, cache, []*v1alpha1.ManifestSync{ms}) })
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(ms), v1alpha1.ReasonSynced, time.Minute)
	if rev := got.Status.Inputs.Sources["podinfo"]; !strings.HasPrefix(rev, "refs:sha256:") || !strings.Contains(rev, "@HEAD@sha1:") {
		t.Errorf("the source's revision %q: want the refs' digest, then the commit", rev)
	}
	inFluxRender(ctx, t, filepath.Join(content, "overlays", "staging"), ns, vars, secrets)
}

// inAPIServer checks that the object the API server holds has every field
// of want (a Secret's stringData as the data the API server keeps).
func inAPIServer(ctx context.Context, want map[string]any) error {
	if sd, ok := want["stringData"].(map[string]any); ok {
		data := map[string]any{}
		for k, v := range sd {
			data[k] = base64.StdEncoding.EncodeToString([]byte(v.(string)))
		}
		want["data"] = data
		delete(want, "stringData")
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": want["apiVersion"], "kind": want["kind"]}}
	md := want["metadata"].(map[string]any)
	if err := remoteEnv.Client.Get(ctx, keyOf(md["namespace"].(string), md["name"].(string)), u); err != nil {
		return err
	}
	return subset("", want, u.Object)
}

// subset reports the first field of want that got lacks or holds
// otherwise; lists are of the same length, item by item (the API server
// adds defaults inside them).
func subset(at string, want, got any) error {
	switch w := want.(type) {
	case map[string]any:
		gm, _ := got.(map[string]any)
		for k, v := range w {
			if err := subset(at+"."+k, v, gm[k]); err != nil {
				return err
			}
		}
		return nil
	case []any:
		gl, _ := got.([]any)
		if len(gl) != len(w) {
			return fmt.Errorf("%s has %d items, Flux applies %d", at, len(gl), len(w))
		}
		for i := range w {
			if err := subset(fmt.Sprintf("%s[%d]", at, i), w[i], gl[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Errorf("%s is %v, Flux applies %v", at, got, want)
	}
	return nil
}

// The ConfigMaps and Secrets of substituteFrom are read as the
// ManifestSync's service account: one it may not read fails the source
// with the API server's refusal, the very one an object source of that
// Secret gets. A required one that is missing fails the source naming
// it; an optional one may be missing.
func TestSubstituteFromReadAsServiceAccount(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "vars"}, Data: map[string][]byte{"env": []byte("prod")}}); err != nil {
		t.Fatal(err)
	}
	build := func(from ...v1alpha1.SubstituteReference) []v1alpha1.Source {
		return []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "test://kustomize"}},
			{Name: "app", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", Path: "base", SubstituteFrom: from}},
		}
	}
	object := newSync(home, "object", v1alpha1.ManifestSyncSpec{
		Sources:            []v1alpha1.Source{{Name: "vars", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "vars"}}},
		Targets:            targets(target),
		ServiceAccountName: "nobody",
	})
	ref := newSync(home, "ref", v1alpha1.ManifestSyncSpec{
		Sources:            build(v1alpha1.SubstituteReference{Kind: "Secret", Name: "vars"}),
		Targets:            targets(target),
		ServiceAccountName: "nobody",
	})
	missing := newSync(home, "missing", v1alpha1.ManifestSyncSpec{Sources: build(v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "absent"}), Targets: targets(target)})
	optional := newSync(home, "optional", v1alpha1.ManifestSyncSpec{Sources: build(v1alpha1.SubstituteReference{Kind: "ConfigMap", Name: "absent", Optional: true}), Targets: targets(target)})
	for _, ms := range []*v1alpha1.ManifestSync{object, ref, missing, optional} {
		createSync(t, ms)
	}
	refusal := func(ms *v1alpha1.ManifestSync) string {
		msg := condition(waitFor(t, ms, v1alpha1.ReasonSourceFailed), v1alpha1.ConditionReady).Message
		_, after, ok := strings.Cut(msg, "Secret "+home+"/vars: ")
		if !ok || !strings.Contains(after, "forbidden") || !strings.Contains(after, `"system:serviceaccount:`+home+`:nobody"`) {
			t.Errorf("%s: Ready message %q, want the Secret forbidden to the account", ms.Name, msg)
		}
		return after
	}
	if o, r := refusal(object), refusal(ref); o != r {
		t.Errorf("the refusal of a substituteFrom Secret %q differs from an object source's %q", r, o)
	}
	msg := condition(waitFor(t, missing, v1alpha1.ReasonSourceFailed), v1alpha1.ConditionReady).Message
	if want := `source "app": ConfigMap/absent: ConfigMap ` + home + `/absent not found`; !strings.Contains(msg, want) {
		t.Errorf("missing ConfigMap: %q, want %q", msg, want)
	}
	ready(t, optional)
	configMapWith(t, timeout, optional, target, "cfg", "env", "base")
}

func init() {
	// A repository whose ConfigMap takes a label from a variable.
	repos["test://substitute"] = &engine.Snapshot{Revision: "main@sha1:5b570000", Files: map[string][]byte{
		"cm.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  labels:\n    pw: ${password}\n"),
	}}
}

// The values of a substituteFrom Secret are Secret values: one that the
// API server refuses as a label shows masked in the condition and the
// event, and never in status, events or logs, as such or in base64.
func TestSubstitutedSecretNeverReported(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, ns := env.Namespace(t, nil), env.Namespace(t, nil)
	const value = "Not A Label Value!" // the API server refuses it as a label
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "db"}, Data: map[string][]byte{"password": []byte(value)}}); err != nil {
		t.Fatal(err)
	}
	ms := newSync(home, "leak", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: "test://substitute",
			Build: v1alpha1.Build{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "Secret", Name: "db"}}}}}},
		Targets: targets(ns),
	})
	createSync(t, ms)
	got := waitFor(t, ms, v1alpha1.ReasonApplyFailed)
	if msg := condition(got, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "***") || !strings.Contains(msg, "metadata.labels") {
		t.Errorf("the API server's refusal is not in the condition, masked: %q", msg)
	}
	waitEvent(t, ms, EventSyncFailed, "***")
	checkNoLeak(t, ms, []string{value, base64.StdEncoding.EncodeToString([]byte(value))})
}
