package importer

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzImport: whatever the YAML, Decode and Import return an error or a
// result, never panic.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"flux.yaml", "argo.yaml", "oci.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: argoproj.io/v1alpha1\nkind: ApplicationSet\nmetadata: {name: a}\nspec: {generators: [{list: {elements: [1]}}], template: 3}\n"))
	f.Add([]byte("apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a}\nspec: {chart: {spec: {sourceRef: 7}}, values: [1]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("fuzz.yaml", data)
		if err != nil {
			return
		}
		_, _ = Import(objs, Options{Repos: checkout()})
	})
}

// TestWrongTypes replaces, one at a time, every value of every fixture
// object with a value of each other type: Import returns an error or a
// result, never panics.
func TestWrongTypes(t *testing.T) {
	objs := load(t, "flux.yaml", "argo.yaml", "oci.yaml")
	var paths [][]any
	for i, o := range objs {
		walkPaths(o.Content, []any{i}, &paths)
	}
	if len(paths) < 100 {
		t.Fatalf("only %d values", len(paths))
	}
	n := 0
	for _, p := range paths {
		for _, v := range []any{float64(7), "x", []any{float64(1)}, map[string]any{"a": "b"}, nil} {
			c := load(t, "flux.yaml", "argo.yaml", "oci.yaml")
			setPath(c[p[0].(int)].Content, p[1:], v)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%v = %#v: panic: %v", p, v, r)
					}
				}()
				_, _ = Import(c, Options{Repos: checkout()})
			}()
			n++
		}
	}
	t.Logf("%d imports of altered fixtures", n)
}

func walkPaths(v any, prefix []any, out *[][]any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			p := append(append([]any{}, prefix...), k)
			*out = append(*out, p)
			walkPaths(e, p, out)
		}
	case []any:
		for i, e := range v {
			p := append(append([]any{}, prefix...), i)
			*out = append(*out, p)
			walkPaths(e, p, out)
		}
	}
}

func setPath(v any, path []any, val any) {
	for i, k := range path {
		last := i == len(path)-1
		switch c := v.(type) {
		case map[string]any:
			if last {
				c[k.(string)] = val
				return
			}
			v = c[k.(string)]
		case []any:
			if last {
				c[k.(int)] = val
				return
			}
			v = c[k.(int)]
		}
	}
}
