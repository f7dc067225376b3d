package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// seamTransform renders one ConfigMap, inputs, whose data is the revision
// of every source as the evaluation saw it (ctx.sources[NAME].revision).
const seamTransform = `def main(ctx):
    return [{
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "inputs"},
        "data": {name: ctx.sources[name].revision for name in ["repo", "cfg", "secrets"]},
    }]
`

// TestSourcesResolveAlike is the seam's acceptance test: one spec with a
// git source (a git daemon on 127.0.0.1), an object source and an object
// set source, resolved by the operator, engine eval, engine vet and engine
// diff, gives the same input digests.
//
// The operator reads the object and the set from the API server; the CLI
// has no cluster to read them from and reads the local copies beside the
// sync file (cfg.yaml, secrets.yaml), here the very objects the API server
// returns (uid and resourceVersion included), so their digests are the
// same by construction of the revision (resourceVersion:N for an object,
// objects:N@sha256 over each selected object's uid and resourceVersion
// for a set); the git source is fetched by both from the daemon. What is
// compared, per command:
//   - the operator: status.inputs.sources, the reference;
//   - eval -o json: inputs.sources, equal to the operator's;
//   - vet: a policy pins the data of the rendered inputs ConfigMap (the
//     revisions its evaluation saw) to the operator's inputs, and passes;
//     the same policy with one revision changed fails, so it does check;
//   - diff: the rendered inputs ConfigMap equals the one the operator
//     applied (no change); with the object read from a copy without its
//     resourceVersion (a content digest), diff shows the change.
func TestSourcesResolveAlike(t *testing.T) {
	env := needCluster(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)

	content := gittest.TempDir(t)
	writeFiles(t, content, map[string]string{"transform.star": seamTransform})
	root := gittest.TempDir(t)
	hash := gittest.Publish(t, root, "seam", content)
	url := gittest.Daemon(t, root) + "/seam.git"
	t.Setenv("XDG_CACHE_HOME", gittest.TempDir(t))

	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings"}, Data: map[string]string{"mode": "seam"}}
	objs := []client.Object{cfg}
	for _, name := range []string{"a", "b", "c"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{"k": name}}
		if name != "c" {
			s.Labels = map[string]string{"replicate": "yes"}
		}
		objs = append(objs, s)
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	syncFile := filepath.Join(dir, "sync.yaml")
	writeFiles(t, dir, map[string]string{"sync.yaml": fmt.Sprintf(`apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: seam, namespace: %[1]s}
spec:
  sources:
  - name: repo
    git: {url: %[2]q, ref: {branch: main}}
  - name: cfg
    object: {apiVersion: v1, kind: ConfigMap, name: settings}
  - name: secrets
    objects: {apiVersion: v1, kind: Secret, labelSelector: {matchLabels: {replicate: "yes"}}}
  transform:
    starlark: {source: repo, path: transform.star}
  targets:
  - name: here
    namespace: %[1]s
`, ns, url)})

	// The operator.
	sf, err := readSyncFile(context.Background(), 0, syncFile)
	if err != nil {
		t.Fatal(err)
	}
	ms := sf.Sync
	if err := env.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, ms) })
	want := waitSynced(t, env, ms).Status.Inputs.Sources
	if want["repo"] != "main@sha1:"+hash || !strings.HasPrefix(want["cfg"], "resourceVersion:") || !strings.HasPrefix(want["secrets"], "objects:2@sha256:") {
		t.Fatalf("the operator's inputs: %v", want)
	}

	// The local copies: the objects as the API server serves them.
	live := func(o client.Object) map[string]any {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1.")))
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), u); err != nil {
			t.Fatal(err)
		}
		return u.Object
	}
	writeYAML := func(name string, v any) {
		b, err := yaml.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, dir, map[string]string{name: string(b)})
	}
	writeYAML("cfg.yaml", live(cfg))
	var items []any
	for _, o := range objs[1:] {
		items = append(items, live(o))
	}
	writeYAML("secrets.yaml", map[string]any{"apiVersion": "v1", "kind": "List", "items": items})

	// engine eval.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"eval", "-f", syncFile, "-o", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr.String())
	}
	var res struct {
		Inputs struct{ Sources map[string]string } `json:"inputs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	if !maps.Equal(res.Inputs.Sources, want) {
		t.Errorf("eval's inputs %v, the operator's %v", res.Inputs.Sources, want)
	}

	// engine vet, with a policy that the inputs it saw are the operator's.
	vet := func(inputs map[string]string) (int, string) {
		policy := t.TempDir()
		var fields []string
		for _, k := range slices.Sorted(maps.Keys(inputs)) {
			fields = append(fields, fmt.Sprintf("%s: %q", k, inputs[k]))
		}
		writeFiles(t, policy, map[string]string{"seam.cue": "package seam\n\n#ConfigMap: {\n\tmetadata: {name: string, ...}\n\tif metadata.name == \"inputs\" {\n\t\tdata: {" + strings.Join(fields, ", ") + "}\n\t}\n\t...\n}\n"})
		var stdout, stderr bytes.Buffer
		code := run([]string{"vet", "--policy", policy, dir}, &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}
	if code, out := vet(want); code != 0 {
		t.Errorf("vet with the operator's inputs: exit %d:\n%s", code, out)
	}
	other := maps.Clone(want)
	other["cfg"] = "resourceVersion:0"
	if code, out := vet(other); code != exitFailed || !strings.Contains(out, "ConfigMap "+ns+"/inputs") || !strings.Contains(out, "data.cfg") {
		t.Errorf("vet with a wrong revision: exit %d:\n%s", code, out)
	}

	// engine diff: nothing would change.
	if code, out, errOut := diff(t, dir); code != 0 || out != "" {
		t.Errorf("diff: exit %d:\n%s%s", code, out, errOut)
	}
	// The object from a copy without its resourceVersion: another revision.
	noRV := live(cfg)
	unstructured.RemoveNestedField(noRV, "metadata", "resourceVersion")
	writeYAML("settings.yaml", noRV)
	if code, out, _ := diff(t, dir, "--source", "cfg="+filepath.Join(dir, "settings.yaml")); code != exitFailed || !strings.Contains(out, "ConfigMap "+ns+"/inputs") || !strings.Contains(out, "sha256:") {
		t.Errorf("diff with another revision of cfg: exit %d:\n%s", code, out)
	}
}
