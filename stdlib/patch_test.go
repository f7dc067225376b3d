package stdlib

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// deployment returns a fresh Deployment, JSON-shaped as the engine holds it.
func deployment() map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata": map[string]any{
			"name":   "web",
			"labels": map[string]any{"app": "web", "tier": "fe"},
		},
		"spec": map[string]any{
			"replicas":                int64(2),
			"progressDeadlineSeconds": int64(1) << 60, // beyond float64's exact integers
			"template": map[string]any{
				"spec": map[string]any{
					"containers": []any{
						map[string]any{"name": "app", "image": "web:1", "ports": []any{
							map[string]any{"containerPort": int64(80)},
						}},
						map[string]any{"name": "sidecar", "image": "proxy:1"},
					},
				},
			},
		},
	}
}

// clone deep-copies a JSON-shaped value, to detect mutation of inputs.
func clone(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = clone(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = clone(e)
		}
		return s
	}
	return v
}

// checkJSONShaped fails if v holds anything but JSON-shaped values with
// int64 integers.
func checkJSONShaped(t *testing.T, path string, v any) {
	t.Helper()
	switch v := v.(type) {
	case nil, bool, string, int64, float64:
	case map[string]any:
		for k, e := range v {
			checkJSONShaped(t, path+"."+k, e)
		}
	case []any:
		for i, e := range v {
			checkJSONShaped(t, fmt.Sprintf("%s[%d]", path, i), e)
		}
	default:
		t.Errorf("%s: %T is not JSON-shaped", path, v)
	}
}

// get follows a path of map keys and list indices.
func get(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			v = v.(map[string]any)[p]
		case int:
			v = v.([]any)[p]
		}
	}
	return v
}

func containerNames(obj map[string]any) []string {
	var names []string
	for _, c := range get(obj, "spec", "template", "spec", "containers").([]any) {
		names = append(names, c.(map[string]any)["name"].(string))
	}
	return names
}

func TestMergePatch(t *testing.T) {
	obj := deployment()
	patch := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"tier": nil, "v": "2"}},
		"spec": map[string]any{
			"replicas": int64(3),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "app", "image": "web:2"},
			}}},
			"ratio": 0.5,
		},
	}
	objBefore, patchBefore := clone(obj), clone(patch)
	out, err := MergePatch(obj, patch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj, objBefore) || !reflect.DeepEqual(patch, patchBefore) {
		t.Error("MergePatch modified its arguments")
	}
	checkJSONShaped(t, "out", out)
	if got := get(out, "metadata", "labels"); !reflect.DeepEqual(got, map[string]any{"app": "web", "v": "2"}) {
		t.Errorf("labels = %v", got)
	}
	if got := get(out, "spec", "replicas"); got != int64(3) {
		t.Errorf("replicas = %#v, want int64(3)", got)
	}
	if got := get(out, "spec", "progressDeadlineSeconds"); got != int64(1)<<60 {
		t.Errorf("progressDeadlineSeconds = %#v, want int64(1<<60)", got)
	}
	if got := get(out, "spec", "ratio"); got != 0.5 {
		t.Errorf("ratio = %#v, want 0.5", got)
	}
	// RFC 7386 replaces lists.
	if got := containerNames(out); !reflect.DeepEqual(got, []string{"app"}) {
		t.Errorf("containers = %v, want [app]", got)
	}
}

func TestMergePatchNil(t *testing.T) {
	out, err := MergePatch(nil, map[string]any{"a": int64(1)})
	if err != nil || !reflect.DeepEqual(out, map[string]any{"a": int64(1)}) {
		t.Errorf("MergePatch(nil, {a: 1}) = %v, %v", out, err)
	}
	out, err = MergePatch(map[string]any{"a": int64(1)}, nil)
	if err != nil || !reflect.DeepEqual(out, map[string]any{"a": int64(1)}) {
		t.Errorf("MergePatch({a: 1}, nil) = %v, %v", out, err)
	}
}

func TestStrategicMerge(t *testing.T) {
	obj := deployment()
	patch := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": "web"},
		"spec": map[string]any{
			"replicas": int64(5),
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "app", "image": "web:2"},
				map[string]any{"name": "debug", "image": "busybox"},
			}}},
		},
	}
	objBefore, patchBefore := clone(obj), clone(patch)
	out, err := StrategicMerge(obj, patch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj, objBefore) || !reflect.DeepEqual(patch, patchBefore) {
		t.Error("StrategicMerge modified its arguments")
	}
	checkJSONShaped(t, "out", out)

	// Containers merge by name: app is updated and keeps its ports, sidecar
	// stays, debug is added.
	names := containerNames(out)
	if len(names) != 3 || !strings.Contains(strings.Join(names, ","), "sidecar") || !strings.Contains(strings.Join(names, ","), "debug") {
		t.Errorf("containers = %v, want app, sidecar and debug", names)
	}
	for _, c := range get(out, "spec", "template", "spec", "containers").([]any) {
		c := c.(map[string]any)
		if c["name"] == "app" {
			if c["image"] != "web:2" {
				t.Errorf("app image = %v, want web:2", c["image"])
			}
			if got := get(c, "ports", 0, "containerPort"); got != int64(80) {
				t.Errorf("app containerPort = %#v, want int64(80)", got)
			}
		}
	}
	if got := get(out, "spec", "replicas"); got != int64(5) {
		t.Errorf("replicas = %#v, want int64(5)", got)
	}
	if got := get(out, "spec", "progressDeadlineSeconds"); got != int64(1)<<60 {
		t.Errorf("progressDeadlineSeconds = %#v, want int64(1<<60)", got)
	}
	if got := get(out, "metadata", "labels"); !reflect.DeepEqual(got, map[string]any{"app": "web", "tier": "fe"}) {
		t.Errorf("labels = %v", got)
	}
}

func TestStrategicMergeDeleteDirectives(t *testing.T) {
	// "$patch: delete" in a list element removes that element.
	out, err := StrategicMerge(deployment(), map[string]any{
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "sidecar", "$patch": "delete"},
		}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := containerNames(out); !reflect.DeepEqual(got, []string{"app"}) {
		t.Errorf("containers = %v, want [app]", got)
	}

	// At the top level it deletes the whole object.
	out, err = StrategicMerge(deployment(), map[string]any{"$patch": "delete"})
	if err != nil || out != nil {
		t.Errorf("top-level $patch: delete = %v, %v; want nil, nil", out, err)
	}

	// A {"$patch": "replace"} element replaces the whole list.
	out, err = StrategicMerge(deployment(), map[string]any{
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"$patch": "replace"},
			map[string]any{"name": "only", "image": "only:1"},
		}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := containerNames(out); !reflect.DeepEqual(got, []string{"only"}) {
		t.Errorf("containers = %v, want [only]", got)
	}

	// A null deletes a field.
	out, err = StrategicMerge(deployment(), map[string]any{"metadata": map[string]any{"labels": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(out, "metadata").(map[string]any)["labels"]; ok {
		t.Errorf("labels survived a null: %v", get(out, "metadata"))
	}
}

// TestStrategicMergePreservesScalars checks that values survive the trip
// through kyaml's YAML nodes with their types: strings that look like other
// things stay strings, empty maps and lists stay, numbers keep their kind.
func TestStrategicMergePreservesScalars(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"},
		"data": map[string]any{"a": "yes", "b": "0755", "c": "1e3", "d": "null", "e": "~", "f": "", "y": "n"},
		"spec": map[string]any{"empty": map[string]any{}, "none": []any{}, "f": 1.5, "g": 1e21, "big": int64(9007199254740993), "t": true, "nil": nil},
	}
	out, err := StrategicMerge(obj, map[string]any{"metadata": map[string]any{"labels": map[string]any{"on": "off"}}})
	if err != nil {
		t.Fatal(err)
	}
	checkJSONShaped(t, "out", out)
	want := clone(obj).(map[string]any)
	want["metadata"].(map[string]any)["labels"] = map[string]any{"on": "off"}
	if !reflect.DeepEqual(out, want) {
		got, _ := json.Marshal(out)
		exp, _ := json.Marshal(want)
		t.Errorf("StrategicMerge:\n got %s\nwant %s", got, exp)
	}
}

func TestStrategicMergeUnknownKindReplacesLists(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"},
		"spec": map[string]any{
			"items": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}},
			"tags":  []any{"x", "y"},
		},
	}
	out, err := StrategicMerge(obj, map[string]any{"spec": map[string]any{
		"items": []any{map[string]any{"name": "c"}},
		"tags":  []any{"z"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"items": []any{map[string]any{"name": "c"}},
		"tags":  []any{"z"},
	}
	if got := get(out, "spec"); !reflect.DeepEqual(got, want) {
		t.Errorf("spec = %v, want %v", got, want)
	}
}

func TestJSONPatch(t *testing.T) {
	obj := deployment()
	ops := []any{
		map[string]any{"op": "replace", "path": "/spec/replicas", "value": int64(7)},
		map[string]any{"op": "add", "path": "/spec/template/spec/containers/0/ports/-", "value": map[string]any{"containerPort": int64(443)}},
		map[string]any{"op": "remove", "path": "/metadata/labels/tier"},
		map[string]any{"op": "add", "path": "/spec/paused", "value": false},
		map[string]any{"op": "add", "path": "/spec/ratio", "value": 0.25},
	}
	objBefore, opsBefore := clone(obj), clone(ops)
	out, err := JSONPatch(obj, ops)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj, objBefore) || !reflect.DeepEqual(ops, opsBefore) {
		t.Error("JSONPatch modified its arguments")
	}
	checkJSONShaped(t, "out", out)
	want := deployment()
	want["spec"].(map[string]any)["replicas"] = int64(7)
	want["spec"].(map[string]any)["paused"] = false
	want["spec"].(map[string]any)["ratio"] = 0.25
	ports := get(want, "spec", "template", "spec", "containers", 0).(map[string]any)
	ports["ports"] = append(ports["ports"].([]any), map[string]any{"containerPort": int64(443)})
	delete(get(want, "metadata", "labels").(map[string]any), "tier")
	if !reflect.DeepEqual(out, want) {
		got, _ := json.Marshal(out)
		exp, _ := json.Marshal(want)
		t.Errorf("JSONPatch:\n got %s\nwant %s", got, exp)
	}
}

func TestJSONPatchErrors(t *testing.T) {
	for _, tc := range []struct {
		ops  []any
		want string
	}{
		{[]any{
			map[string]any{"op": "test", "path": "/kind", "value": "Deployment"},
			map[string]any{"op": "replace", "path": "/spec/x", "value": int64(1)},
		}, `op 1: replace "/spec/x": path not found`},
		{[]any{map[string]any{"op": "test", "path": "/spec/replicas", "value": int64(3)}}, `op 0: test "/spec/replicas": test failed: got 2, want 3`},
		{[]any{map[string]any{"op": "test", "path": "/spec/nope", "value": "a"}}, `op 0: test "/spec/nope": test failed: got nothing, want "a"`},
		{[]any{map[string]any{"op": "copy", "from": "/nope", "path": "/x"}}, `op 0: copy "/nope" to "/x": path not found`},
		{[]any{map[string]any{"op": "remove", "path": "/spec/template/spec/containers/5"}}, `op 0: remove "/spec/template/spec/containers/5": array index out of range`},
		{[]any{map[string]any{"op": "add", "value": int64(1)}}, `op 0: "add": missing string "path"`},
		{[]any{"add"}, `op 0: got string, want dict`},
	} {
		_, err := JSONPatch(deployment(), tc.ops)
		if err == nil || err.Error() != tc.want {
			t.Errorf("JSONPatch(%v) error = %v, want %q", tc.ops, err, tc.want)
		}
	}
}

func TestJSONPatchCopyLimit(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	obj := map[string]any{"a": map[string]any{"s": big}}
	var ops []any
	for i := range 5 { // doubles the document each time
		ops = append(ops, map[string]any{"op": "copy", "from": "/a", "path": fmt.Sprintf("/a/c%d", i)})
	}
	_, err := JSONPatch(obj, ops)
	if err == nil || !strings.Contains(err.Error(), "exceed") {
		t.Errorf("JSONPatch of doubling copies: err = %v, want a size error", err)
	}
}
