package starlark

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.starlark.net/starlark"
)

// TestConverterSize checks that the size the converter counts, which
// Limits.MaxBytes bounds, is the length of the JSON encoding.
func TestConverterSize(t *testing.T) {
	for _, src := range []string{
		`None`, `True`, `False`, `0`, `-42`, `1 << 62`, `0.5`, `"plain"`,
		`"quote \" backslash \\ newline \n tab \t bell \a"`, `"ünïcödé ✓"`,
		`[]`, `{}`, `[1, "two", None, [3]]`,
		`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "b"}}, "data": {"k": "<v & w>"}}`,
	} {
		v, err := starlark.EvalOptions(&fileOptions, &starlark.Thread{}, "size", src, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := converter{budget: 1 << 20}
		x, err := c.fromValue(v, 0)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			t.Fatal(err)
		}
		if want := int64(buf.Len() - 1); c.size != want { // Encode adds a newline
			t.Errorf("%s: counted %d bytes, JSON has %d: %s", src, c.size, want, buf.Bytes())
		}
	}
}
