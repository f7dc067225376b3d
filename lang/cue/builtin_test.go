package cue

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// decodeAll reads the YAML documents of a file as objects.
func decodeAll(t testing.TB, data []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj)
	}
}

func decode(t testing.TB, src string) map[string]any {
	t.Helper()
	objs := decodeAll(t, []byte(src))
	if len(objs) != 1 {
		t.Fatalf("want one object, have %d", len(objs))
	}
	return objs[0]
}

func builtin(t testing.TB, name string) *Schemas {
	t.Helper()
	s, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuiltinK8sValid(t *testing.T) {
	k8s := builtin(t, "k8s")
	data, err := os.ReadFile(filepath.Join("testdata", "k8s", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range decodeAll(t, data) {
		name := obj["kind"].(string)
		t.Run(name, func(t *testing.T) {
			want := normalize(obj)
			out, vs, err := k8s.Validate(obj)
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) > 0 {
				t.Fatalf("violations: %v", vs)
			}
			// The generated schemas have no defaults: the object comes
			// back as it went in, in the canonical shape.
			if !reflect.DeepEqual(out, want) {
				t.Errorf("got %v\nwant %v", out, want)
			}
		})
	}
}

// deployment is a valid Deployment that the cases below break.
const deployment = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: web-dev}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "web:1.4.2", ports: [{containerPort: 8080}]}
`

func TestBuiltinK8sViolations(t *testing.T) {
	k8s := builtin(t, "k8s")
	type want struct {
		path, rule, msg, file string
	}
	for _, tc := range []struct {
		name string
		edit func(obj map[string]any)
		src  string // instead of editing deployment
		want []want
	}{{
		name: "wrong type",
		edit: func(o map[string]any) { dig(o, "spec")["replicas"] = "two" },
		want: []want{{"spec.replicas", "#Deployment", `conflicting values int32 and "two"`, "builtin:k8s/apps_v1_types_go_gen.cue"}},
	}, {
		name: "out of range",
		edit: func(o map[string]any) { dig(o, "spec")["replicas"] = int64(1) << 40 },
		want: []want{{"spec.replicas", "#Deployment", "invalid value 1099511627776", "builtin:k8s/"}},
	}, {
		name: "unknown field",
		edit: func(o map[string]any) { container(o)["imagee"] = "web:1" },
		want: []want{{"spec.template.spec.containers[0].imagee", "#Deployment", "field not allowed", "builtin:k8s/core_v1_types_go_gen.cue"}},
	}, {
		name: "missing required field",
		edit: func(o map[string]any) { delete(container(o), "name") },
		want: []want{{"spec.template.spec.containers[0].name", "#Deployment", "incomplete value string", "builtin:k8s/core_v1_types_go_gen.cue"}},
	}, {
		name: "missing name",
		edit: func(o map[string]any) { delete(dig(o, "metadata"), "name") },
		want: []want{{"metadata.name", "#Object", "incomplete value", "builtin:k8s/k8s.cue"}},
	}, {
		name: "wrong apiVersion",
		edit: func(o map[string]any) { o["apiVersion"] = "extensions/v1beta1" },
		want: []want{{"apiVersion", "#Deployment", `conflicting values "apps/v1" and "extensions/v1beta1"`, "builtin:k8s/k8s.cue"}},
	}, {
		name: "every violation",
		edit: func(o map[string]any) {
			dig(o, "spec")["replicas"] = "two"
			container(o)["imagee"] = "web:1"
			delete(dig(o, "metadata"), "name")
		},
		want: []want{
			{"spec.replicas", "#Deployment", "conflicting values", "builtin:k8s/"},
			{"spec.template.spec.containers[0].imagee", "#Deployment", "field not allowed", "builtin:k8s/"},
			{"metadata.name", "#Object", "incomplete value", "builtin:k8s/k8s.cue"},
		},
	}, {
		name: "label path",
		edit: func(o map[string]any) {
			dig(o, "metadata")["labels"] = map[string]any{"app.kubernetes.io/name": int64(1)}
		},
		want: []want{{`metadata.labels["app.kubernetes.io/name"]`, "#Deployment", "conflicting values", "builtin:k8s/meta_v1_types_go_gen.cue"}},
	}, {
		name: "secret data not base64",
		src:  "{apiVersion: v1, kind: Secret, metadata: {name: s}, data: {password: 'not base64!'}}",
		want: []want{{"data.password", "#Secret", "invalid value", "builtin:k8s/core_v1_types_go_gen.cue"}},
	}, {
		name: "port not int or string",
		src:  "{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {ports: [{port: 80, targetPort: true}]}}",
		want: []want{
			{"spec.ports[0].targetPort", "#Service", "conflicting values true and int", "builtin:k8s/"},
			{"spec.ports[0].targetPort", "#Service", "conflicting values true and string", "builtin:k8s/"},
		},
	}, {
		name: "custom kind",
		src:  "{apiVersion: example.com/v1, kind: Widget, metadata: {namespace: x}}",
		want: []want{{"metadata.name", "#Object", "incomplete value", "builtin:k8s/k8s.cue"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var obj map[string]any
			if tc.src != "" {
				obj = decode(t, tc.src)
			} else {
				obj = decode(t, deployment)
				tc.edit(obj)
			}
			out, vs, err := k8s.Validate(obj)
			if err != nil {
				t.Fatal(err)
			}
			if out != nil {
				t.Errorf("got an object with violations: %v", out)
			}
			if len(vs) != len(tc.want) {
				t.Fatalf("got %d violations, want %d:\n%s", len(vs), len(tc.want), violationsString(vs))
			}
			for i, w := range tc.want {
				v := vs[i]
				if v.Path != w.path || v.Rule != w.rule || !strings.Contains(v.Msg, w.msg) {
					t.Errorf("violation %d: got %s\nwant path %q rule %q msg containing %q", i, v, w.path, w.rule, w.msg)
				}
				if len(v.Pos) == 0 || !strings.HasPrefix(v.Pos[0].File, w.file) || v.Pos[0].Line == 0 {
					t.Errorf("violation %d: positions %v, want one in %s", i, v.Pos, w.file)
				}
			}
		})
	}
}

func violationsString(vs []Violation) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.String())
		b.WriteString(" ")
		for _, p := range v.Pos {
			b.WriteString(p.String() + " ")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func dig(obj map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		obj = obj[k].(map[string]any)
	}
	return obj
}

func container(obj map[string]any) map[string]any {
	return dig(obj, "spec", "template", "spec")["containers"].([]any)[0].(map[string]any)
}

func TestBuiltinManifestSync(t *testing.T) {
	ms := builtin(t, "manifestsync")
	matches, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "sync.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) == 0 {
		t.Fatal("no examples")
	}
	for _, file := range matches {
		t.Run(filepath.Base(filepath.Dir(file)), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range decodeAll(t, data) {
				out, vs, err := ms.Validate(obj)
				if err != nil || len(vs) > 0 {
					t.Fatalf("err %v, violations:\n%s", err, violationsString(vs))
				}
				// The CRD's defaults are filled in.
				policy := dig(out, "spec", "policy")
				if policy["resources"] == nil || policy["deletion"] != "Delete" || policy["drift"] == nil || policy["prune"] == nil {
					t.Errorf("policy defaults missing: %v", policy)
				}
				if dig(out, "spec")["interval"] == nil {
					t.Errorf("interval default missing")
				}
			}
		})
	}
}

func TestBuiltinManifestSyncViolations(t *testing.T) {
	ms := builtin(t, "manifestsync")
	const head = "apiVersion: manifestsync.dev/v1alpha1\nkind: ManifestSync\nmetadata: {name: web, namespace: platform}\n"
	for _, tc := range []struct {
		name, spec, path string
	}{
		{"no targets", "spec: {targets: []}", "spec.targets"},
		{"two source kinds", "spec: {sources: [{name: a, git: {url: u}, object: {apiVersion: v1, kind: Secret, name: s}}], targets: [{name: t}]}", "spec.sources[0]"},
		{"unknown schema source", "spec: {sources: [{name: a, git: {url: u}}], schemas: [{source: b}], targets: [{name: t}]}", "spec.schemas[0].source"},
		{"unknown transform source", "spec: {sources: [{name: a, git: {url: u}}], transform: {starlark: {source: b, path: x.star}}, targets: [{name: t}]}", "spec.transform.starlark.source"},
		{"bad policy", "spec: {targets: [{name: t}], policy: {resources: Steal}}", "spec.policy.resources"},
		{"bad name", "spec: {targets: [{name: Web}]}", "spec.targets[0].name"},
		{"duplicate targets", "spec: {targets: [{name: t}, {name: t}]}", "spec._uniqueTargetNames"},
		{"unknown field", "spec: {targets: [{name: t}], sorces: []}", "spec.sorces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, vs, err := ms.Validate(decode(t, head+tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				if strings.HasPrefix(v.Path, tc.path) && v.Rule == "#ManifestSync" && len(v.Pos) > 0 {
					return
				}
			}
			t.Errorf("no violation at %s:\n%s", tc.path, violationsString(vs))
		})
	}
}

func TestBuiltinUnknown(t *testing.T) {
	if _, err := Builtin("nope"); err == nil || !strings.Contains(err.Error(), "k8s") {
		t.Errorf("got %v, want an error listing the builtin sets", err)
	}
	if _, err := Builtin("../schemas"); err == nil {
		t.Error("a path is not a builtin set")
	}
	a, b := builtin(t, "k8s"), builtin(t, "k8s")
	if a != b {
		t.Error("a builtin set is compiled once")
	}
}
