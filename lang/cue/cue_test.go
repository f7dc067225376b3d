package cue

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// tree makes an in-memory file tree of "name: content" pairs.
func tree(kv ...string) map[string][]byte {
	files := map[string][]byte{}
	for i := 0; i < len(kv); i += 2 {
		files[kv[i]] = []byte(kv[i+1])
	}
	return files
}

func mustLoad(t testing.TB, files map[string][]byte, dir string) *Schemas {
	t.Helper()
	s, err := Load("repo", files, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// appSchema has defaults, a closed definition per kind and #Object.
const appSchema = `package schemas

#Object: {
	apiVersion!: string
	kind!:       string
	metadata: {
		name!: string
		...
	}
	...
}

#App: {
	apiVersion: "example.com/v1"
	kind:       "App"
	metadata: {
		name: string
		labels?: [string]: string
	}
	spec: {
		replicas: *1 | int & >=0
		image:    string
		ports: [...{port: int, protocol: *"TCP" | "UDP"}]
		ratio?: number
	}
}
`

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		dir   string
		want  string
	}{
		{"syntax", tree("s/a.cue", "package s\n\nx: {\n"), "s", "repo/s/a.cue:3:6: expected '}', found 'EOF'"},
		{"conflict", tree("s/a.cue", "package s\n\nx: 1\nx: 2\n"), "s", "repo/s/a.cue:"},
		{"conflict in a definition", tree("s/a.cue", "package s\n\n#App: {\n\tx: int & string\n}\n"), "s", "repo/s/a.cue:4:"},
		{"two packages", tree("s/a.cue", "package a\n", "s/b.cue", "package b\n"), "s", `found packages "a" (a.cue) and "b" (b.cue)`},
		{"no files", tree("s/a.txt", "x"), "s", "no CUE files"},
		{"no directory", tree("s/a.cue", "package s\n"), "t", "t"},
		{"outside", tree("s/a.cue", "package s\n"), "../s", "outside the file tree"},
		{"bad file name", tree("/etc/a.cue", "package s\n"), ".", "invalid file name"},
		{"import without module", tree("s/a.cue", "package s\nimport \"example.com/lib\"\nx: lib.y\n"), "s", "repo/s/a.cue:2:8"},
		{"missing import", tree(
			"cue.mod/module.cue", "module: \"example.com/x\"\nlanguage: version: \"v0.17.0\"\n",
			"s/a.cue", "package s\nimport \"example.com/x/nope\"\nx: nope.y\n"), "s", "repo/s/a.cue:2:8"},
		{"cue.mod/gen", tree(
			"cue.mod/module.cue", "module: \"example.com/x\"\nlanguage: version: \"v0.17.0\"\n",
			"cue.mod/gen/k8s.io/api/v1/a.cue", "package v1\n#A: int\n",
			"s/a.cue", "package s\nimport \"k8s.io/api/v1\"\nx: v1.#A\n"), "s", "make them packages of the module"},
		{"registry is off", tree(
			"cue.mod/module.cue", "module: \"example.com/x\"\nlanguage: version: \"v0.17.0\"\ndeps: \"example.com/dep@v0\": v: \"v0.1.0\"\n",
			"s/a.cue", "package s\nimport \"example.com/dep\"\nx: dep.y\n"), "s", `cannot find package "example.com/dep": cannot fetch example.com/dep@v0.1.0: module not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("repo", tc.files, tc.dir)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `schemas "repo": `) {
				t.Errorf("got %q, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestLoadModule(t *testing.T) {
	files := tree(
		"cue.mod/module.cue", "module: \"example.com/policies@v0\"\nlanguage: version: \"v0.17.0\"\n",
		"lib/image.cue", "package lib\n\n#Image: string & =~\":[^:]+$\" & !~\":latest$\"\n",
		"pack/app.cue", "package pack\n\nimport \"example.com/policies/lib\"\n\n#App: spec: image: lib.#Image\n#App: {...}\n",
		"README.md", "not CUE",
	)
	s := mustLoad(t, files, "pack")
	_, vs, err := s.Validate(map[string]any{"kind": "App", "spec": map[string]any{"image": "web:latest"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Path != "spec.image" || vs[0].Rule != "#App" {
		t.Fatalf("got %s", violationsString(vs))
	}
	var files2 []string
	for _, p := range vs[0].Pos {
		files2 = append(files2, p.File)
	}
	if !slicesContain(files2, "repo/lib/image.cue") || !slicesContain(files2, "repo/pack/app.cue") {
		t.Errorf("positions %v, want the import and the use", vs[0].Pos)
	}
}

func slicesContain(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func TestValidate(t *testing.T) {
	s := mustLoad(t, tree("schemas/app.cue", appSchema), "schemas/")
	obj := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "web"},
		"spec": map[string]any{
			"image": "web:1",
			"ports": []any{map[string]any{"port": 80}},
			"ratio": 2.0,
		},
	}
	before := fmt.Sprint(obj)
	out, vs, err := s.Validate(obj)
	if err != nil || len(vs) > 0 {
		t.Fatalf("err %v, violations %v", err, vs)
	}
	want := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas": int64(1),
			"image":    "web:1",
			"ports":    []any{map[string]any{"port": int64(80), "protocol": "TCP"}},
			"ratio":    int64(2), // JSON has no integral floats
		},
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got  %#v\nwant %#v", out, want)
	}
	if fmt.Sprint(obj) != before {
		t.Errorf("obj was modified: %v", obj)
	}

	// A complete object in the canonical shape comes back as it is.
	out2, _, err := s.Validate(want)
	if err != nil || reflect.ValueOf(out2).Pointer() != reflect.ValueOf(want).Pointer() {
		t.Errorf("want the same map back, err %v", err)
	}
}

func TestValidateShapes(t *testing.T) {
	s := mustLoad(t, tree("app.cue", appSchema), "")
	obj := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "web", "labels": map[string]string{"a": "b"}},
		"spec": map[string]any{
			"replicas": json.Number("3"),
			"image":    "web:1",
			"ports":    []map[string]any{{"port": 80, "protocol": "UDP"}},
			"ratio":    json.Number("0.5"),
		},
	}
	out, vs, err := s.Validate(obj)
	if err != nil || len(vs) > 0 {
		t.Fatalf("err %v, violations %v", err, vs)
	}
	want := map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "App",
		"metadata":   map[string]any{"name": "web", "labels": map[string]any{"a": "b"}},
		"spec": map[string]any{
			"replicas": int64(3),
			"image":    "web:1",
			"ports":    []any{map[string]any{"port": int64(80), "protocol": "UDP"}},
			"ratio":    0.5,
		},
	}
	if !reflect.DeepEqual(out, want) {
		t.Errorf("got  %#v\nwant %#v", out, want)
	}

	for _, bad := range []any{make(chan int), struct{}{}, []int{1}} {
		if _, _, err := s.Validate(map[string]any{"kind": "App", "x": map[string]any{"y": bad}}); err == nil || !strings.Contains(err.Error(), `"x": "y": unsupported value`) {
			t.Errorf("%T: got %v, want an error naming the field", bad, err)
		}
	}
}

func TestValidateViolations(t *testing.T) {
	s := mustLoad(t, tree("schemas/app.cue", appSchema), "schemas")
	for _, tc := range []struct {
		name string
		obj  map[string]any
		want []string // path [rule]
	}{{
		name: "conflicts",
		obj: map[string]any{
			"apiVersion": "example.com/v1",
			"kind":       "App",
			"metadata":   map[string]any{"labels": map[string]any{"x": int64(1)}},
			"spec":       map[string]any{"replicas": int64(-1), "ports": []any{map[string]any{"port": "http"}}},
		},
		// CUE leaves out what is merely missing (spec.image) when
		// there are conflicts; a second pass without the conflicting
		// fields finds it.
		want: []string{"metadata.labels.x [#App]", "spec.ports[0].port [#App]", "spec.replicas [#App]", "spec.replicas [#App]", "metadata.name [#Object]", "spec.image [#App]"},
	}, {
		name: "missing",
		obj:  map[string]any{"apiVersion": "example.com/v1", "kind": "App", "metadata": map[string]any{}, "spec": map[string]any{"ports": []any{}}},
		want: []string{"metadata.name [#App]", "spec.image [#App]", "metadata.name [#Object]"},
	}, {
		name: "not allowed",
		obj:  map[string]any{"apiVersion": "example.com/v1", "kind": "App", "metadata": map[string]any{"name": "x"}, "spec": map[string]any{"image": "x", "ports": []any{}, "extra": true}},
		want: []string{"spec.extra [#App]"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, vs, err := s.Validate(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.Path+" ["+v.Rule+"]")
				if len(v.Pos) == 0 || !strings.HasPrefix(v.Pos[0].String(), "repo/schemas/app.cue:") {
					t.Errorf("%s: positions %v", v, v.Pos)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %s\nwant %v", violationsString(vs), tc.want)
			}
		})
	}
}

func TestValidateRules(t *testing.T) {
	s := mustLoad(t, tree("app.cue", appSchema), ".")
	// Only #Object applies to a kind the package does not define.
	_, vs, err := s.Validate(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{}})
	if err != nil || len(vs) != 1 || vs[0].Rule != "#Object" || vs[0].Path != "metadata.name" {
		t.Errorf("err %v, violations %s", err, violationsString(vs))
	}
	// No kind at all.
	_, vs, _ = s.Validate(map[string]any{"metadata": map[string]any{"name": "x"}})
	if len(vs) != 2 || vs[0].Rule != "#Object" {
		t.Errorf("violations %s", violationsString(vs))
	}

	// Neither definition: nothing to do.
	none := mustLoad(t, tree("a.cue", "package a\n#Other: x: int\n"), ".")
	obj := map[string]any{"kind": "App", "anything": []any{1}}
	out, vs, err := none.Validate(obj)
	if err != nil || len(vs) > 0 || reflect.ValueOf(out).Pointer() != reflect.ValueOf(obj).Pointer() {
		t.Errorf("want obj back, got %v %v %v", out, vs, err)
	}
}

// TestPolicy loads a policy package, as spec.schemas or engine vet
// --policy does, and checks what it allows.
func TestPolicy(t *testing.T) {
	policy := mustLoad(t, tree("policies/workloads.cue", `package policies

// Images are pinned to a version.
#Image: string & !~":latest$" & =~":[^/]+$"

#PodSpec: {
	containers: [...{image: #Image, ...}]
	volumes?: [...{hostPath?: _|_, ...}]
	...
}

#Deployment: {
	spec: template: spec: #PodSpec
	spec: template: {...}
	spec: {...}
	...
}
`), "policies")
	k8s := builtin(t, "k8s")
	good := decode(t, deployment)
	bad := decode(t, deployment)
	container(bad)["image"] = "web:latest"
	for _, s := range []*Schemas{k8s, policy} {
		if _, vs, err := s.Validate(good); err != nil || len(vs) > 0 {
			t.Fatalf("%s: err %v, violations %s", s.Name(), err, violationsString(vs))
		}
	}
	_, vs, err := policy.Validate(bad)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Path != "spec.template.spec.containers[0].image" || vs[0].Rule != "#Deployment" ||
		!strings.Contains(vs[0].Msg, `invalid value "web:latest"`) {
		t.Fatalf("got %s", violationsString(vs))
	}
	if vs[0].Pos[0].File != "repo/policies/workloads.cue" {
		t.Errorf("positions %v, want the policy's file first", vs[0].Pos)
	}
	// A policy leaves the rest open: the k8s schema still passes it.
	if _, vs, _ := k8s.Validate(bad); len(vs) > 0 {
		t.Errorf("k8s: %s", violationsString(vs))
	}
}

func TestRecycle(t *testing.T) {
	s, err := LoadFS("repo", mustMapFS(t, tree("app.cue", appSchema)), ".", Options{RecycleAfter: 3})
	if err != nil {
		t.Fatal(err)
	}
	first := s.idle[0]
	var outs []string
	for i := range 10 {
		out, vs, err := s.Validate(map[string]any{
			"apiVersion": "example.com/v1", "kind": "App",
			"metadata": map[string]any{"name": fmt.Sprint("app-", i)},
			"spec":     map[string]any{"image": "web:1", "ports": []any{}, "nope": i},
		})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, fmt.Sprint(out, vs))
	}
	ev := s.idle[0]
	if len(s.idle) != 1 || ev == first || ev.uses != 1 {
		t.Errorf("the context was not recycled: %d uses", ev.uses)
	}
	for i, o := range outs {
		if want := strings.ReplaceAll(outs[0], "app-0", fmt.Sprint("app-", i)); o != want {
			t.Errorf("validation %d differs after recycling:\n%s\n%s", i, o, want)
		}
	}
}

func mustMapFS(t testing.TB, files map[string][]byte) *mapFS {
	t.Helper()
	fsys, err := newMapFS(files)
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func TestConcurrent(t *testing.T) {
	for _, n := range []int{1, 3} {
		s, err := LoadFS("repo", mustMapFS(t, tree("app.cue", appSchema)), ".", Options{Concurrency: n, RecycleAfter: 7})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer func() {
			if len(s.idle) > n || len(s.running) != 0 {
				t.Errorf("concurrency %d: %d contexts, %d running", n, len(s.idle), len(s.running))
			}
		}()
		for g := range 4 {
			wg.Go(func() {
				for i := range 25 {
					obj := map[string]any{
						"apiVersion": "example.com/v1", "kind": "App",
						"metadata": map[string]any{"name": fmt.Sprint("app-", g, "-", i)},
						"spec":     map[string]any{"image": "web:1", "ports": []any{}, "replicas": int64(i % 2)},
					}
					if i%5 == 0 {
						obj["spec"].(map[string]any)["replicas"] = "x"
					}
					out, vs, err := s.Validate(obj)
					switch {
					case err != nil:
						t.Error(err)
					case i%5 == 0 && (len(vs) == 0 || vs[0].Path != "spec.replicas"):
						t.Errorf("violations %v", vs)
					case i%5 != 0 && (len(vs) > 0 || out["spec"].(map[string]any)["replicas"] != int64(i%2)):
						t.Errorf("got %v %v", out, vs)
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestMemoryFlat validates many objects, each with values of its own, and
// checks that the heap does not grow with them.
//
// Field names are another matter: CUE v0.17 interns every field name it
// ever sees in a process-wide table, whatever the context, so a stream of
// objects whose keys never repeat grows the heap by their names.
func TestMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	s, err := LoadFS("repo", mustMapFS(t, tree("app.cue", appSchema)), ".", Options{RecycleAfter: 3000})
	if err != nil {
		t.Fatal(err)
	}
	obj := func(i int) map[string]any {
		labels := map[string]any{}
		for j := range 10 {
			labels[fmt.Sprintf("label-%d", (i+j)%100)] = fmt.Sprintf("value-%d-%d", i, j)
		}
		return map[string]any{
			"apiVersion": "example.com/v1", "kind": "App",
			"metadata": map[string]any{"name": fmt.Sprint("app-", i), "labels": labels},
			"spec":     map[string]any{"image": fmt.Sprint("web:", i), "ports": []any{map[string]any{"port": int64(i)}}},
		}
	}
	validate := func(from, to int) {
		for i := from; i < to; i++ {
			if _, vs, err := s.Validate(obj(i)); err != nil || len(vs) > 0 {
				t.Fatal(err, vs)
			}
		}
	}
	validate(0, 1000) // warm up
	before := heapAlloc()
	validate(1000, 21000)
	after := heapAlloc()
	t.Logf("heap before %d KiB, after 20000 validations %d KiB", before>>10, after>>10)
	if after > before+8<<20 {
		t.Errorf("heap grew from %d to %d KiB", before>>10, after>>10)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestValidateAs(t *testing.T) {
	s := mustLoad(t, tree("p.cue", "package p\n#Params: {replicas: *1 | int & <10, image: string}\n"), ".")
	got, vs, err := s.ValidateAs(map[string]any{"image": "web"}, "#Params")
	if err != nil || len(vs) > 0 {
		t.Fatal(err, vs)
	}
	if got["replicas"] != int64(1) {
		t.Errorf("default not filled: %v", got)
	}
	_, vs, err = s.ValidateAs(map[string]any{"image": "web", "replicas": 20}, "Params")
	found := false
	for _, v := range vs {
		found = found || v.Path == "replicas" && v.Rule == "#Params" && strings.Contains(v.Msg, "out of bound <10") && strings.HasPrefix(v.Pos[0].String(), "repo/p.cue:2:")
	}
	if err != nil || !found {
		t.Errorf("violations %v, err %v; want replicas out of bound", vs, err)
	}
	if _, _, err := s.ValidateAs(map[string]any{}, "#Missing"); err == nil || !strings.Contains(err.Error(), "no definition #Missing") {
		t.Errorf("missing definition: %v", err)
	}
}
