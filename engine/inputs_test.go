package engine

import (
	"fmt"
	"reflect"
	"testing"
)

func TestDecodeDocuments(t *testing.T) {
	docs, err := DecodeDocuments([]byte(`a: 1
big: 9007199254740993
f: 1.5
hex: 0x1F
yes11: yes
quoted: "yes"
date: 2024-01-01
nothing: ~
list: [on, "off", 2]
anchors: &x {k: v}
ref: *x
---
---
# only a comment
---
- 1
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Document{{Line: 1, Value: map[string]any{
		"a": int64(1), "big": int64(9007199254740993), "f": 1.5, "hex": int64(31),
		"yes11": true, "quoted": "yes", "date": "2024-01-01", "nothing": nil,
		"list":    []any{true, "off", int64(2)},
		"anchors": map[string]any{"k": "v"}, "ref": map[string]any{"k": "v"},
	}}, {Line: 16, Value: []any{int64(1)}}}
	if !reflect.DeepEqual(docs, want) {
		t.Fatalf("got %#v\nwant %#v", docs, want)
	}
	laughs := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, c := range "bcdefghi" {
		laughs += fmt.Sprintf("%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", c, c, "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i], "abcdefgh"[i])
	}
	for _, bad := range []string{laughs, "a: [", "a: 1\na: 2\n", "x: .inf\n", "? [a]\n: 1\n",
		// A null key: kubectl (sigs.k8s.io/yaml) refuses it, and so do
		// inputs, as the yaml module always did.
		"null: 1\n", "~: 1\n"} {
		if _, err := DecodeDocuments([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
