package main

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine"
)

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []engine.Namespace // nil: none
		err        string
	}{
		{name: "empty file", data: ""},
		{name: "null documents", data: "---\n~\n---\n"},
		{name: "list without items", data: "apiVersion: v1\nkind: List\nitems: null\n"},
		{
			name: "list and documents",
			data: "kind: List\nitems:\n- kind: Namespace\n  metadata: {name: a, labels: {team: web}}\n---\nkind: Namespace\nmetadata: {name: b}\n",
			want: []engine.Namespace{{Name: "a", Labels: map[string]string{"team": "web"}}, {Name: "b", Labels: map[string]string{}}},
		},
		{
			name: "a label that is a number is its text",
			data: "kind: Namespace\nmetadata: {name: a, labels: {n: 1}}\n",
			want: []engine.Namespace{{Name: "a", Labels: map[string]string{"n": "1"}}},
		},
		{name: "items not a list", data: "kind: List\nitems: {a: b}\n", err: "f.yaml:2: items: want a list"},
		{name: "no kind", data: "metadata: {name: a}\n", err: "f.yaml:1: no kind"},
		{name: "not an object", data: "- a\n", err: "f.yaml:1: not an object"},
		{name: "another API group", data: "apiVersion: example.com/v1\nkind: Namespace\n", err: `f.yaml:1: apiVersion "example.com/v1", want v1`},
		{name: "item of another kind", data: "kind: List\nitems:\n- kind: Namespace\n  metadata: {name: a}\n- kind: Secret\n", err: "f.yaml:5: items[1]: a Secret, want a Namespace"},
		{name: "no metadata", data: "kind: Namespace\n", err: "f.yaml:1: metadata: want an object"},
		{name: "name not a string", data: "kind: Namespace\nmetadata:\n  name: [a]\n", err: "f.yaml:3: metadata.name: want a string"},
		{name: "labels not an object", data: "kind: Namespace\nmetadata:\n  name: a\n  labels: [a]\n", err: "f.yaml:4: metadata.labels: want an object"},
		{name: "bad label value", data: "kind: Namespace\nmetadata:\n  name: a\n  labels:\n    team: a b\n", err: `f.yaml:5: metadata.labels: label team: value "a b"`},
		{name: "not YAML", data: "kind: [\n", err: "f.yaml: yaml: line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNamespaces("f.yaml", []byte(tc.data))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to start with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []engine.Namespace
			for _, ns := range got {
				names = append(names, ns.Namespace)
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Fatalf("got %v, want %v", names, tc.want)
			}
		})
	}
}

// An empty file gives an empty list, which is not the nil of no flag: a
// cluster with no namespaces, where every selector matches none.
func TestNamespaceFlagsEmptyIsNotNone(t *testing.T) {
	var none namespaceFlags
	if got, err := none.load(context.Background(), 0, strings.NewReader("")); err != nil || got.local != nil {
		t.Fatalf("no flag: got %v, %v; want nil", got, err)
	}
	f := namespaceFlags{files: []string{"-"}}
	given, err := f.load(context.Background(), 0, strings.NewReader(""))
	got := given.local
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("empty stdin: got %#v, %v; want an empty list", got, err)
	}
	twice := namespaceFlags{files: []string{"-", "-"}}
	if _, err := twice.load(context.Background(), 0, strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "stdin is given twice") {
		t.Fatalf("stdin twice: err = %v", err)
	}
}
