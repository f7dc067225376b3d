package helm_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/helm"
	"github.com/manifestsync/manifestsync/stdlib"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml with bin/helm")

// helmCLI is the Helm v3 CLI `make helm` builds: the oracle of the golden
// files.
const helmCLI = "../../bin/helm"

// goldenCharts are the charts of testdata: values (helpers, tpl, .Files,
// .helmignore, capabilities, a null that deletes a default, an empty
// document, NOTES.txt), deps (a dependency vendored as a directory, the
// same under an alias with a condition, one as a .tgz, globals), crds
// (crds/ and a CR) and hooks.
var goldenCharts = []string{"values", "deps", "crds", "hooks"}

// helmArgs are the `helm template` arguments the golden files are made
// with; render gives the renderer the same.
func helmArgs(chart string) []string {
	return []string{"template", "rel", "testdata/" + chart, "--namespace", "ns1", "-f", "testdata/" + chart + "/values-override.yaml",
		"--include-crds", "--kube-version", "v1.37.0", "--api-versions", "example.com/v1"}
}

func readChart(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func render(t *testing.T, chart string) ([]stdlib.HelmManifest, error) {
	t.Helper()
	files := readChart(t, filepath.Join("testdata", chart))
	return helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
		Name:        chart,
		Files:       files,
		Values:      []stdlib.HelmValues{{Name: "values-override.yaml", Data: files["values-override.yaml"]}},
		Release:     "rel",
		Namespace:   "ns1",
		IncludeCRDs: true,
		Capabilities: stdlib.HelmCapabilities{
			KubeVersion: "v1.37.0",
			APIVersions: append(helm.DefaultAPIVersions(), "example.com/v1"),
		},
	})
}

// documents are the non-empty documents of a YAML stream, parsed.
func documents(t *testing.T, data []byte) []any {
	t.Helper()
	docs, err := stdlib.DecodeYAMLStream(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, d := range docs {
		if d.Value != nil {
			out = append(out, d.Value)
		}
	}
	return out
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (.*)$`)

// TestGolden: the objects rendered equal, in order, those `helm template`
// (Helm v3.22, bin/helm) prints for the same chart, values, release,
// namespace and capabilities, compared after parsing; and each comes from
// the same template.
func TestGolden(t *testing.T) {
	for _, chart := range goldenCharts {
		t.Run(chart, func(t *testing.T) {
			golden, err := os.ReadFile(filepath.Join("testdata", chart+".golden.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := render(t, chart)
			if err != nil {
				t.Fatal(err)
			}
			var got []any
			var names []string
			for _, m := range out {
				docs := documents(t, m.Content)
				got = append(got, docs...)
				for range docs {
					names = append(names, m.Name)
				}
			}
			want := documents(t, golden)
			if len(got) == 0 || !reflect.DeepEqual(got, want) {
				t.Fatalf("rendered\n%v\nhelm template printed\n%v", got, want)
			}
			var wantNames []string
			for _, part := range strings.Split(string(golden), "---\n")[1:] {
				m := sourceLine.FindStringSubmatch(part)
				if m != nil && len(documents(t, []byte(part))) > 0 {
					wantNames = append(wantNames, m[1])
				}
			}
			if !reflect.DeepEqual(names, wantNames) {
				t.Errorf("templates %v, helm template's %v", names, wantNames)
			}
		})
	}
}

// TestGoldenIsHelms checks that the golden files are what bin/helm prints
// today (-update rewrites them); it is skipped without bin/helm.
func TestGoldenIsHelms(t *testing.T) {
	if _, err := os.Stat(helmCLI); err != nil {
		t.Skip("no bin/helm (make helm)")
	}
	for _, chart := range goldenCharts {
		out, err := exec.Command(helmCLI, helmArgs(chart)...).Output()
		if err != nil {
			t.Fatalf("helm template %s: %v", chart, err)
		}
		file := filepath.Join("testdata", chart+".golden.yaml")
		if *update {
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		golden, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, golden) {
			t.Errorf("%s is not what bin/helm prints now; run go test -run TestGoldenIsHelms -update", file)
		}
	}
}

func chartOf(files map[string]string) map[string][]byte {
	out := map[string][]byte{"Chart.yaml": []byte("apiVersion: v2\nname: bad\nversion: 0.1.0\n")}
	for p, s := range files {
		out[p] = []byte(s)
	}
	return out
}

// TestErrors: what a chart author or a values writer gets wrong is named
// by chart, template, file and line; a Secret's values never show.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name   string
		files  map[string]string
		values []stdlib.HelmValues
		want   []string
		not    []string
	}{{
		name:  "exec error",
		files: map[string]string{"templates/cm.yaml": "a: 1\nb: {{ .Values.x.y.z }}\n"},
		want:  []string{`chart "bad": bad/templates/cm.yaml:2:13: executing "bad/templates/cm.yaml" at <.Values.x.y.z>: nil pointer evaluating`},
	}, {
		name:  "parse error",
		files: map[string]string{"templates/cm.yaml": "a: 1\n\nb: {{ nosuchfunc }}\n"},
		want:  []string{`chart "bad": `, "bad/templates/cm.yaml:3", `function "nosuchfunc" not defined`},
	}, {
		name:  "fail",
		files: map[string]string{"templates/cm.yaml": "{{ fail \"no, not like this\" }}\n"},
		want:  []string{"bad/templates/cm.yaml:1:3", "no, not like this"},
	}, {
		name:  "output not YAML",
		files: map[string]string{"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: [\n"},
		want:  []string{"bad/templates/cm.yaml", "line"},
	}, {
		name:   "values not YAML",
		files:  map[string]string{"templates/cm.yaml": "x: 1\n"},
		values: []stdlib.HelmValues{{Name: "values/prod.yaml", Data: []byte("a: 1\nb: [\nc: 3\n")}},
		want:   []string{`chart "bad": values/prod.yaml:`, "did not find expected"},
	}, {
		name:   "Secret values not YAML",
		files:  map[string]string{"templates/cm.yaml": "x: 1\n"},
		values: []stdlib.HelmValues{{Name: "Secret/creds key values.yaml", Data: []byte("password: hunter2-secret\nb: [hunter2-secret\n"), Sensitive: true}},
		want:   []string{`Secret/creds key values.yaml:`, "not valid YAML"},
		not:    []string{"hunter2"},
	}, {
		name: "values.schema.json",
		files: map[string]string{
			"values.schema.json": `{"type": "object", "properties": {"replicas": {"type": "integer"}}}`,
			"templates/cm.yaml":  "x: 1\n",
		},
		values: []stdlib.HelmValues{{Name: "values", Data: []byte("replicas: three\n")}},
		want:   []string{"values don't meet the specifications of the schema", "replicas"},
	}, {
		name:  "missing dependency",
		files: map[string]string{"Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\ndependencies:\n- name: redis\n  version: 1.0.0\n", "templates/cm.yaml": "x: 1\n"},
		want:  []string{"dependencies redis are not in charts/"},
	}, {
		name:  "kubeVersion",
		files: map[string]string{"Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\nkubeVersion: '<1.20.0'\n"},
		want:  []string{"requires kubeVersion <1.20.0", "v1.37.0"},
	}, {
		name:  "no Chart.yaml",
		files: map[string]string{"Chart.yaml": "", "templates/cm.yaml": "x: 1\n"},
		want:  []string{"chart"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			files := chartOf(c.files)
			if c.files["Chart.yaml"] == "" && c.name == "no Chart.yaml" {
				delete(files, "Chart.yaml")
			}
			_, err := helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
				Name: "bad", Files: files, Values: c.values, Release: "rel", Namespace: "ns",
			})
			if err == nil {
				t.Fatal("rendered")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q shows %q", err, n)
				}
			}
		})
	}
}

// TestValuesOrder: values merge as -f files do, a later set winning and
// maps merging key by key, the chart's defaults coalesced under; a
// targetPath set puts its data as a string, as Flux does.
func TestValuesOrder(t *testing.T) {
	files := chartOf(map[string]string{
		"values.yaml":       "a: chart\nb: chart\nm: {p: chart, q: chart}\n",
		"templates/cm.yaml": "a: {{ .Values.a }}\nb: {{ .Values.b }}\np: {{ .Values.m.p }}\nq: {{ .Values.m.q }}\nr: {{ .Values.m.r }}\nt: {{ .Values.deep.cert | quote }}\n",
	})
	out, err := helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
		Name: "bad", Files: files, Release: "rel", Namespace: "ns",
		Values: []stdlib.HelmValues{
			{Name: "one", Data: []byte(`{"a": "one", "m": {"p": "one"}}`)},
			{Name: "two", Data: []byte("m:\n  r: two\n")},
			{Name: "three", Data: []byte("line1\nline2"), TargetPath: "deep.cert"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := documents(t, out[0].Content)
	want := []any{map[string]any{"a": "one", "b": "chart", "p": "one", "q": "chart", "r": "two", "t": "line1\nline2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestHostileChart: a template that renders more than MaxBytes fails; a
// chart over MaxChartBytes is refused before it is read; a template that
// loops for ever, or recurses without end, ends at the caller's deadline
// (last: those renders go on in this process).
func TestHostileChart(t *testing.T) {
	_, err := helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
		Name: "bad", Files: chartOf(map[string]string{"templates/x.yaml": `data: {{ range $i := 1000 }}{{ repeat 1000 "a" }}{{ end }}`}), Release: "rel", Namespace: "ns",
		MaxBytes: 64 << 10,
	})
	if err == nil || !strings.Contains(err.Error(), "over the limit of 65536 bytes") {
		t.Errorf("err = %v", err)
	}
	_, err = helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
		Name: "bad", Files: chartOf(map[string]string{"files/big": strings.Repeat("x", helm.MaxChartBytes)}), Release: "rel", Namespace: "ns",
	})
	if err == nil || !strings.Contains(err.Error(), "over the limit of 16777216") {
		t.Errorf("err = %v", err)
	}
	for name, tpl := range map[string]string{
		"loop": "{{ range $i := 100000000000 }}{{ end }}",
		// Within Helm's include depth (1,000), 2^40 calls.
		"recurse": `{{ define "f" }}{{ if gt (int .) 0 }}{{ include "f" (sub (int .) 1) }}{{ include "f" (sub (int .) 1) }}{{ end }}{{ end }}{{ include "f" 40 }}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := helm.Renderer{}.RenderChart(ctx, stdlib.HelmChart{
				Name: "bad", Files: chartOf(map[string]string{"templates/x.yaml": tpl}), Release: "rel", Namespace: "ns",
			})
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `chart "bad": rendering did not end in time`) {
				t.Fatalf("err = %v", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v", took)
			}
			if len(err.Error()) > 2048 {
				t.Errorf("a message of %d bytes", len(err.Error()))
			}
			if !helm.Stuck() {
				t.Error("Stuck() is false while the render runs on")
			}
		})
	}
}

// A cluster whose capabilities could not be read (a remote cluster that
// does not answer) fails the render with the reason, not with defaults a
// chart would silently take for the cluster's.
func TestUnknownCapabilities(t *testing.T) {
	dir := filepath.Join("testdata", "values")
	_, err := helm.Renderer{}.RenderChart(context.Background(), stdlib.HelmChart{
		Name: "values", Files: readChart(t, dir), Release: "rel", Namespace: "ns1",
		Capabilities: stdlib.HelmCapabilities{Unknown: `cluster "far": unreachable (retrying): no answer within 2s`},
	})
	if err == nil || !strings.Contains(err.Error(), `the cluster's capabilities are unknown: cluster "far": unreachable`) {
		t.Fatalf("got %v, want the capabilities' reason", err)
	}
}
