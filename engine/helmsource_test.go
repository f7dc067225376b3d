package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/helm"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// chartRepo is a source holding a chart at app/ and a values file beside
// it: the chart renders a ConfigMap from its values and the release, a
// Secret, and a CRD from crds/.
func chartRepo() map[string][]byte {
	return map[string][]byte{
		"app/Chart.yaml":  []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n"),
		"app/values.yaml": []byte("color: red\nsize: small\nreplicas: 1\n"),
		"app/templates/cm.yaml": []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-cfg
  namespace: {{ .Release.Namespace }}
data:
  color: {{ .Values.color | quote }}
  size: {{ .Values.size | quote }}
  replicas: {{ .Values.replicas | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  releaseNamespace: {{ .Release.Namespace | quote }}
`),
		"app/templates/secret.yaml": []byte(`{{- if .Values.password }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-pw
stringData:
  password: {{ .Values.password | quote }}
{{- end }}
`),
		"app/templates/fail.yaml": []byte("{{- if .Values.explode }}\n{{ fail (printf \"cannot use %s\" .Values.password) }}\n{{- end }}\n"),
		"app/crds/widget.yaml": []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`),
		"app/templates/NOTES.txt": []byte("installed {{ .Release.Name }}\n"),
		"values/prod.yaml":        []byte("size: large\n"),
		"values/broken.yaml":      []byte("size: large\n  bad: [\n"),
	}
}

const helmSync = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata:
  name: shop
  namespace: ops
spec:
  params:
    color: blue
  sources:
    - name: charts
      git: {url: https://example.com/charts.git}
    - name: plain
      git: {url: https://example.com/plain.git}
    - name: app
      helm:
        source: charts
        path: app
%s
  targets:
    - name: dev
      namespace: dev
    - name: prod
      namespace: prod
      params:
        color: green
%s
`

func evalHelm(t *testing.T, helmFields, rest string, opts engine.Options, snaps map[string]*engine.Snapshot) *engine.Result {
	t.Helper()
	sf, err := engine.LoadSyncFile("sync.yaml", fmt.Appendf(nil, helmSync, helmFields, rest))
	if err != nil {
		t.Fatal(err)
	}
	if snaps == nil {
		snaps = map[string]*engine.Snapshot{}
	}
	files := chartRepo()
	if snaps["charts"] == nil {
		snaps["charts"] = &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}
	}
	if snaps["plain"] == nil {
		plain := map[string][]byte{"sa.yaml": []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: plain}\n")}
		snaps["plain"] = &engine.Snapshot{Files: plain, Revision: engine.ContentDigest(plain)}
	}
	if opts.Helm == nil {
		opts.Helm = helm.Renderer{}
	}
	res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps, Name: sf.Sync.Name}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func byKindName(t *testing.T, tr *engine.TargetResult) map[string]map[string]any {
	t.Helper()
	if tr.Err != nil {
		t.Fatalf("target %s: %v", tr.Name, tr.Err)
	}
	out := map[string]map[string]any{}
	for _, o := range tr.Objects {
		out[o.GetKind()+"/"+o.GetName()] = o.Object
	}
	return out
}

// TestHelmPerTarget: a chart in another source renders per target with
// release = the ManifestSync's name, namespace = the target's, values =
// values.yaml <- valuesFrom in order (a file of a source, the target's
// params) <- helm.values, so that each target gets its own; the CRDs come
// first; the source holding the chart adds no objects of its own; the
// inputs record the chart's revision.
func TestHelmPerTarget(t *testing.T) {
	res := evalHelm(t, `        includeCRDs: false
        values: {size: medium, replicas: 2}
        valuesFrom:
          - {source: charts, path: values/prod.yaml}
          - {params: true}`, "", engine.Options{}, nil)
	want := map[string]string{"dev": "blue", "prod": "green"}
	for _, tr := range res.Targets {
		objs := byKindName(t, tr)
		if len(objs) != 2 {
			t.Errorf("target %s: %d objects, want ServiceAccount and ConfigMap: %v", tr.Name, len(objs), objs)
		}
		cm := objs["ConfigMap/shop-cfg"]
		if cm == nil {
			t.Fatalf("target %s: no ConfigMap shop-cfg: %v", tr.Name, objs)
		}
		data := cm["data"].(map[string]any)
		// size: helm.values' medium wins over the file's large.
		if data["color"] != want[tr.Name] || data["size"] != "medium" || data["replicas"] != "2" || data["kube"] != helm.DefaultKubeVersion {
			t.Errorf("target %s: data %v", tr.Name, data)
		}
		if ns := cm["metadata"].(map[string]any)["namespace"]; ns != tr.Name || data["releaseNamespace"] != tr.Name {
			t.Errorf("target %s: namespace %v, .Release.Namespace %v", tr.Name, ns, data["releaseNamespace"])
		}
	}
	rev := res.Inputs.Sources["app"]
	if !strings.HasPrefix(rev, "app@1.0.0@sha256:") {
		t.Errorf("app's revision %q", rev)
	}
}

// TestHelmValuesOrder: values.yaml <- each valuesFrom in its order <-
// helm.values, as Flux merges a HelmRelease's valuesFrom and then its
// values: a key in both helm.values and a ConfigMap takes helm.values';
// a target's param ({params: true}) wins over the ConfigMap before it
// and loses to helm.values.
func TestHelmValuesOrder(t *testing.T) {
	refs := map[string]*engine.Snapshot{"app": {Revision: "refs", Refs: map[string]map[string]string{
		"ConfigMap/web": {"values.yaml": "size: large\ncolor: cm\nreplicas: 3\n"},
	}}}
	res := evalHelm(t, `        includeCRDs: false
        values: {size: medium}
        valuesFrom:
          - {kind: ConfigMap, name: web}
          - {params: true}`, `    - name: big
      namespace: big
      params: {size: huge}`, engine.Options{}, refs)
	want := map[string]string{
		// color: the params' (spec's, prod's own) over the ConfigMap's;
		// size: helm.values' over the ConfigMap's and big's param;
		// replicas: the ConfigMap's over values.yaml's.
		"dev":  "blue medium 3",
		"prod": "green medium 3",
		"big":  "blue medium 3",
	}
	if len(res.Targets) != len(want) {
		t.Fatalf("%d targets, want %d", len(res.Targets), len(want))
	}
	for _, tr := range res.Targets {
		data, _ := byKindName(t, tr)["ConfigMap/shop-cfg"]["data"].(map[string]any)
		if got := fmt.Sprintf("%v %v %v", data["color"], data["size"], data["replicas"]); got != want[tr.Name] {
			t.Errorf("target %s: color size replicas = %s, want %s", tr.Name, got, want[tr.Name])
		}
	}
}

// TestHelmOptions: releaseName, namespace (.Release.Namespace: the
// objects go to the target's namespace, as every input), the CRDs first
// by default, and the capabilities given.
func TestHelmOptions(t *testing.T) {
	res := evalHelm(t, `        releaseName: web
        namespace: fixed`, "", engine.Options{Capabilities: engine.HelmCapabilities{KubeVersion: "v1.31.4"}, Targets: []string{"dev"}}, nil)
	tr := res.Targets[0]
	objs := byKindName(t, tr)
	cm := objs["ConfigMap/web-cfg"]
	if cm == nil || cm["data"].(map[string]any)["releaseNamespace"] != "fixed" || cm["metadata"].(map[string]any)["namespace"] != "dev" {
		t.Fatalf("objects %v", objs)
	}
	if kube := cm["data"].(map[string]any)["kube"]; kube != "v1.31.4" {
		t.Errorf("kube %v", kube)
	}
	if tr.Objects[0].GetKind() != "CustomResourceDefinition" {
		t.Errorf("first object %s, want the chart's CRD", tr.Objects[0].GetKind())
	}
	other := evalHelm(t, "", "", engine.Options{Capabilities: engine.HelmCapabilities{KubeVersion: "v1.32.0"}}, nil)
	if other.Revision == evalHelm(t, "", "", engine.Options{}, nil).Revision {
		t.Error("the capabilities do not change the evaluation's revision")
	}
}

// TestHelmTransform: a transform sees the target's rendered objects in
// ctx.inputs and ctx.sources.app.objects(), and can render a chart itself
// with helm.template.
func TestHelmTransform(t *testing.T) {
	res := evalHelm(t, "        valuesFrom: [{params: true}]", `  transform:
    starlark:
      inline: |
        def main(ctx):
            mine = [o for o in ctx.inputs if o["kind"] == "ConfigMap"]
            chart = ctx.sources.app.objects("app/templates/*.yaml")
            again = helm.template("@charts//app", values={"color": "violet"}, release="again", namespace=ctx.target.namespace, include_crds=False)
            out = []
            for o in mine + chart + again:
                if o["kind"] == "ConfigMap":
                    name = o["metadata"]["name"] + "-" + str(len(out))
                    out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"color": o["data"]["color"]}})
            return out`, engine.Options{}, nil)
	for _, tr := range res.Targets {
		objs := byKindName(t, tr)
		colors := map[string]any{}
		for name, o := range objs {
			colors[name] = o["data"].(map[string]any)["color"]
		}
		want := map[string]any{"ConfigMap/shop-cfg-0": "blue", "ConfigMap/shop-cfg-1": "blue", "ConfigMap/again-cfg-2": "violet"}
		if tr.Name == "prod" {
			want["ConfigMap/shop-cfg-0"], want["ConfigMap/shop-cfg-1"] = "green", "green"
		}
		if fmt.Sprint(colors) != fmt.Sprint(want) {
			t.Errorf("target %s: %v, want %v", tr.Name, colors, want)
		}
	}
}

// TestHelmErrors: a template that fails names the source, chart, file
// and line, and a Secret's value it quotes is masked; a values file that
// is not YAML names the file and line; a required valuesFrom that is
// missing names the object, an optional one is skipped; no renderer is an
// error of the target, not a panic.
func TestHelmErrors(t *testing.T) {
	secretRefs := func() map[string]*engine.Snapshot {
		return map[string]*engine.Snapshot{"app": {Revision: "refs", Refs: map[string]map[string]string{
			"Secret/pw": {"values.yaml": "password: correct-horse-battery\nexplode: true\n"},
		}}}
	}
	res := evalHelm(t, "        valuesFrom: [{kind: Secret, name: pw}]", "", engine.Options{}, secretRefs())
	err := res.Targets[0].Err
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{`source "app": chart "app": `, "app/templates/fail.yaml:2:", "cannot use ***"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "correct-horse") {
		t.Errorf("error %q shows the Secret's value", err)
	}
	res = evalHelm(t, "        valuesFrom: [{kind: Secret, name: pw, valuesKey: other, optional: true}]", "", engine.Options{Targets: []string{"dev"}}, secretRefs())
	if err := res.Targets[0].Err; err != nil {
		t.Fatalf("an optional key that is missing: %v", err)
	}
	sf, _ := engine.LoadSyncFile("sync.yaml", fmt.Appendf(nil, helmSync, "        valuesFrom: [{kind: ConfigMap, name: nope}]", ""))
	files := chartRepo()
	_, err = engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: map[string]*engine.Snapshot{
		"charts": {Files: files, Revision: "x"}, "plain": {Files: map[string][]byte{}, Revision: "y"},
	}}, engine.Options{Helm: helm.Renderer{}})
	if err == nil || !strings.Contains(err.Error(), `source "app": helm.valuesFrom[0]: ConfigMap/nope not found`) {
		t.Errorf("error %v", err)
	}
	res = evalHelm(t, "        valuesFrom: [{kind: ConfigMap, name: nope, optional: true}]", "", engine.Options{Targets: []string{"dev"}}, nil)
	if err := res.Targets[0].Err; err != nil {
		t.Errorf("an optional valuesFrom: %v", err)
	}
	res = evalHelm(t, "        valuesFrom: [{source: charts, path: values/broken.yaml}]", "", engine.Options{Targets: []string{"dev"}}, nil)
	if err := res.Targets[0].Err; err == nil || !strings.Contains(err.Error(), `source "app": chart "app": charts/values/broken.yaml:2: `) {
		t.Errorf("error %v", err)
	}
	sf, _ = engine.LoadSyncFile("sync.yaml", fmt.Appendf(nil, helmSync, "", ""))
	res, err = engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: map[string]*engine.Snapshot{
		"charts": {Files: files, Revision: "x"}, "plain": {Files: map[string][]byte{}, Revision: "y"},
	}}, engine.Options{})
	if err != nil || res.Targets[0].Err == nil || !strings.Contains(res.Targets[0].Err.Error(), `source "app": no chart renderer`) {
		t.Errorf("without a renderer: %v, %v", err, res.Targets[0].Err)
	}
}

// TestHelmTimeout: a chart whose template never ends fails its target at
// the evaluation's timeout, as a script's limit (lstar.LimitError).
func TestHelmTimeout(t *testing.T) {
	files := chartRepo()
	files["app/templates/loop.yaml"] = []byte("{{ range $i := 100000000000 }}{{ end }}\n")
	snaps := map[string]*engine.Snapshot{"charts": {Files: files, Revision: "x"}}
	start := time.Now()
	res := evalHelm(t, "        includeCRDs: false", "", engine.Options{Limits: lstar.Limits{Timeout: 300 * time.Millisecond}, Targets: []string{"dev"}}, snaps)
	err := res.Targets[0].Err
	var le *lstar.LimitError
	if !errors.As(err, &le) || le.Limit != lstar.LimitTimeout || !strings.Contains(err.Error(), `source "app": rendering the chart: timeout of 300ms exceeded`) {
		t.Errorf("error %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestHelmCompact: a compact target (Options.Compact) whose inputs are
// rendered makes the same objects again.
func TestHelmCompact(t *testing.T) {
	fields := "        includeCRDs: false\n        valuesFrom: [{params: true}]"
	full := evalHelm(t, fields, "", engine.Options{}, nil)
	compact := evalHelm(t, fields, "", engine.Options{Compact: true}, nil)
	for i, tr := range compact.Targets {
		if tr.Objects != nil {
			t.Errorf("target %s kept its objects", tr.Name)
		}
		again, err := tr.WithManifests()
		if err != nil {
			t.Fatal(err)
		}
		a, _ := yaml.Marshal(again.Objects)
		b, _ := yaml.Marshal(full.Targets[i].Objects)
		if string(a) != string(b) || again.Digest != full.Targets[i].Digest {
			t.Errorf("target %s made again:\n%s\nevaluated:\n%s", tr.Name, a, b)
		}
	}
}

// BenchmarkHelmFanOut renders the test chart for 100 targets, each with
// its own namespace and params: the cost of a chart fanned out.
func BenchmarkHelmFanOut(b *testing.B) {
	var targets strings.Builder
	for i := range 100 {
		fmt.Fprintf(&targets, "    - {name: t%d, namespace: ns%d, params: {color: c%d}}\n", i, i, i)
	}
	sync := strings.Replace(fmt.Sprintf(helmSync, "        includeCRDs: false\n        valuesFrom: [{params: true}]", ""), "  targets:\n", "  targets:\n"+targets.String(), 1)
	sf, err := engine.LoadSyncFile("sync.yaml", []byte(sync))
	if err != nil {
		b.Fatal(err)
	}
	files := chartRepo()
	plain := map[string][]byte{}
	snaps := map[string]*engine.Snapshot{"charts": {Files: files, Revision: "x"}, "plain": {Files: plain, Revision: "y"}}
	for b.Loop() {
		res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps, Name: "shop"}, engine.Options{Helm: helm.Renderer{}})
		if err != nil || res.Err() != nil || len(res.Targets) != 102 {
			b.Fatal(err, res.Err())
		}
	}
}
