package engine_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"

	"github.com/manifestsync/manifestsync/engine"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/stdlib"
)

// trickyYAML are files on which ctx.inputs (engine.DecodeDocuments) and
// yaml.decode_all used to disagree, or could: the expected values are
// Kubernetes' reading (kubectl, sigs.k8s.io/yaml).
var trickyYAML = []struct {
	name, in string
	want     []any  // the documents, when it decodes
	err      string // part of the error, when it does not
}{
	{name: "empty documents", in: "---\n---\na: 1\n---\n\n---\n# c\n---\nb: 2\n",
		want: []any{map[string]any{"a": int64(1)}, map[string]any{"b": int64(2)}}},
	{name: "null documents", in: "null\n---\n~\n---\na: 1\n", want: []any{map[string]any{"a": int64(1)}}},
	{name: "separator with comment", in: "a: 1\n--- # next\nb: 2\n",
		want: []any{map[string]any{"a": int64(1)}, map[string]any{"b": int64(2)}}},
	{name: "separator glued to content", in: "a: 1\n---b: 2\n", err: "invalid Yaml document separator"},
	{name: "CRLF", in: "a: 1\r\n---\r\nb: 2\r\n",
		want: []any{map[string]any{"a": int64(1)}, map[string]any{"b": int64(2)}}},
	{name: "List is one document", in: "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n",
		want: []any{map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
			map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}}}}}},
	{name: "duplicate keys", in: "a: 1\n---\nb: 1\nb: 2\n", err: `line 4: key "b" already set`},
	{name: "anchors, merge and a y key", in: "x: &a {p: 1}\ny: *a\nz:\n  <<: *a\n  q: 2\n",
		want: []any{map[string]any{"x": map[string]any{"p": int64(1)}, "true": map[string]any{"p": int64(1)},
			"z": map[string]any{"p": int64(1), "q": int64(2)}}}},
	{name: "YAML 1.1 booleans as keys", in: "yes: 1\n1: 2\n1.5: 3\noff: 4\n",
		want: []any{map[string]any{"true": int64(1), "1": int64(2), "1.5": int64(3), "false": int64(4)}}},
	{name: "null key", in: "null: 4\n", err: "line 1: yaml: a mapping key is null"},
	{name: "list key", in: "a: 1\n? [b]\n: 2\n", err: "line 1: yaml: a mapping key is null, a list or a map"},
	// Numbers are read as JSON numbers, as Kubernetes does: 1.0 and 1e3
	// are whole, so they are ints (ctx.inputs used to say float).
	{name: "numbers", in: "a: 1\nb: 1.0\nc: 1e3\nd: 0777\nf: 0x1F\ng: 1_000\nh: 12345678901234567890\nj: +12\nk: .5\n",
		want: []any{map[string]any{"a": int64(1), "b": int64(1), "c": int64(1000), "d": int64(511), "f": int64(31),
			"g": int64(1000), "h": 12345678901234567890.0, "j": int64(12), "k": 0.5}}},
	{name: "infinity", in: "a: 1\n---\nb: .inf\n", err: "document 1: line 3: "},
	{name: "booleans", in: "a: yes\nb: On\nc: y\nd: TRUE\ne: 'yes'\nf: no\n",
		want: []any{map[string]any{"a": true, "b": true, "c": true, "d": true, "e": "yes", "f": false}}},
	{name: "timestamps stay strings", in: "a: 2001-12-14\n",
		want: []any{map[string]any{"a": "2001-12-14"}}},
	{name: "binary", in: "a: !!binary aGVsbG8=\n", want: []any{map[string]any{"a": "hello"}}},
	{name: "block scalar with an indented separator", in: "a: |\n  ---\n  x\n",
		want: []any{map[string]any{"a": "---\nx\n"}}},
	{name: "a list and a scalar", in: "- 1\n- 2\n---\nhello\n", want: []any{[]any{int64(1), int64(2)}, "hello"}},
	{name: "JSON", in: `{"a": 1, "b": [1.5, true, null]}`,
		want: []any{map[string]any{"a": int64(1), "b": []any{1.5, true, nil}}}},
	{name: "syntax error in a later document", in: "a: 1\n---\nb: [\n", err: "document 1: yaml: line 3"},
}

// TestInputsAndYAMLModuleAgree feeds each tricky file to ctx.inputs' decoder
// and to yaml.decode_all and wants the same documents, or the same error.
func TestInputsAndYAMLModuleAgree(t *testing.T) {
	decodeAll := stdlib.YAML.Members["decode_all"]
	for _, tc := range trickyYAML {
		t.Run(tc.name, func(t *testing.T) {
			var inputs []any
			docs, ierr := engine.DecodeDocuments([]byte(tc.in))
			for _, d := range docs {
				inputs = append(inputs, d.Value)
			}
			var module []any
			v, merr := starlark.Call(&starlark.Thread{}, decodeAll, starlark.Tuple{starlark.String(tc.in)}, nil)
			if merr == nil {
				g, err := lstar.FromValue(v)
				if err != nil {
					t.Fatalf("yaml.decode_all result: %v", err)
				}
				module = g.([]any)
			}
			if tc.err != "" {
				if ierr == nil || !strings.Contains(ierr.Error(), tc.err) {
					t.Errorf("inputs: error %v, want one with %q", ierr, tc.err)
				}
				if merr == nil || merr.Error() != "yaml.decode_all: "+ierr.Error() {
					t.Errorf("yaml.decode_all: error %v, want the inputs' %v", merr, ierr)
				}
				return
			}
			if ierr != nil || merr != nil {
				t.Fatalf("inputs: %v; yaml.decode_all: %v", ierr, merr)
			}
			if !reflect.DeepEqual(inputs, tc.want) {
				t.Errorf("inputs:\n got %s\nwant %s", show(inputs), show(tc.want))
			}
			if !reflect.DeepEqual(module, tc.want) {
				t.Errorf("yaml.decode_all:\n got %s\nwant %s", show(module), show(tc.want))
			}
		})
	}
}

// TestYAMLErrorsShowNoValues: an error about a key does not quote the
// value, which may be a Secret's.
func TestYAMLErrorsShowNoValues(t *testing.T) {
	for _, in := range []string{"stringData:\n  null: hunter2\n", "stringData:\n  ? [k]\n  : hunter2\n", "a: 1\na: hunter2\n"} {
		_, err := engine.DecodeDocuments([]byte(in))
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: error %v", in, err)
		}
	}
}

// TestFileErrorNamesTheLine: a decoding error of a file reads FILE:LINE,
// the line counted in the whole file, not in its document.
func TestFileErrorNamesTheLine(t *testing.T) {
	_, err := engine.DecodeDocuments([]byte("a: 1\n---\nb: 2\n---\n# c\nc: [1\n"))
	if err == nil {
		t.Fatal("no error")
	}
	if got, want := engine.FileError("app/cm.yaml", err).Error(), "app/cm.yaml:6: did not find expected ',' or ']'"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestDocumentLines: each document's line is the line of its first content
// in the whole file, after separators, comments and blank lines.
func TestDocumentLines(t *testing.T) {
	docs, err := engine.DecodeDocuments([]byte("# head\n---\n\na: 1\n---\n---\n# c\nb: 2\nc: 3\n--- # x\n- 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, d := range docs {
		lines = append(lines, d.Line)
	}
	if want := []int{4, 8, 11}; !slices.Equal(lines, want) {
		t.Errorf("lines %v, want %v", lines, want)
	}
}

// show prints a value with its Go types and sorted keys.
func show(v any) string {
	switch v := v.(type) {
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, fmt.Sprintf("%q: %s", k, show(v[k])))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		var parts []string
		for _, e := range v {
			parts = append(parts, show(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprintf("%T(%v)", v, v)
}

// BenchmarkDecodeManyDocuments decodes a file of 2,000 small documents.
func BenchmarkDecodeManyDocuments(b *testing.B) {
	var sb strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sb, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c%d\ndata:\n  k: v\n", i)
	}
	data := []byte(sb.String())
	for b.Loop() {
		if _, err := engine.DecodeDocuments(data); err != nil {
			b.Fatal(err)
		}
	}
}
