package engine

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// The canonical form is encoding/json's, without HTML escaping, so a digest
// can be checked with any JSON tool that sorts keys.
func TestAppendCanonicalMatchesEncodingJSON(t *testing.T) {
	for _, v := range []any{
		nil, true, "", "plain", "quote\" back\\ nl\n tab\t ctl\x01 ünï €", "<a&b>", "cr\r bad\xffutf8 \x1f end", "\xe2\x82",
		int64(-42), 1.5, 1e21, 0.000001,
		[]any{}, []any{int64(1), "two", nil, []any{false}},
		map[string]any{}, map[string]any{"b": int64(1), "a": map[string]any{"z": "y", "é": []any{1.25}}},
	} {
		got, err := appendCanonical(nil, v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
			t.Errorf("%#v: got %s, want %s", v, got, want.String())
		}
	}
	if _, err := appendCanonical(nil, map[string]any{"x": math.NaN()}); err == nil {
		t.Error("NaN: no error")
	}
	if _, err := appendCanonical(nil, struct{}{}); err == nil {
		t.Error("struct: no error")
	}
}

func TestDigestIsStable(t *testing.T) {
	a := map[string]any{"x": int64(1), "y": []any{"a", "b"}}
	b := map[string]any{"y": []any{"a", "b"}, "x": int64(1)}
	da, _ := digestJSON(a)
	db, _ := digestJSON(b)
	if da != db || len(da) != len("sha256:")+64 {
		t.Fatalf("%s != %s", da, db)
	}
	c := map[string]any{"y": []any{"b", "a"}, "x": int64(1)}
	if dc, _ := digestJSON(c); dc == da {
		t.Fatal("different values, same digest")
	}
}
