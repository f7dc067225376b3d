package starlark

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

func TestConvertRoundTrip(t *testing.T) {
	docs := []string{
		`null`, `true`, `"s"`, `1`, `-7`, `1.5`, `[]`, `{}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"b":"2","a":"1"}},"data":{"k":"v"}}`,
		`[1,"two",[3,{"four":null}],false,1e300,-0.25]`,
		`{"big":9007199254740991,"neg":-9007199254740991}`,
	}
	for _, doc := range docs {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		sv, err := ToValue(v)
		if err != nil {
			t.Fatalf("ToValue(%s): %v", doc, err)
		}
		back, err := FromValue(sv)
		if err != nil {
			t.Fatalf("FromValue(%s): %v", sv, err)
		}
		if got, want := mustJSON(t, back), mustJSON(t, v); got != want {
			t.Errorf("round trip of %s gave %s", want, got)
		}
	}
}

func TestToValue(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{nil, "None"},
		{3.0, "3"}, // integral JSON numbers are ints in Starlark
		{3.5, "3.5"},
		{json.Number("12"), "12"},
		{json.Number("1.25"), "1.25"},
		{int32(-4), "-4"},
		{uint64(1 << 63), "9223372036854775808"},
		{float32(0.5), "0.5"},
		{[]string{"a", "b"}, `["a", "b"]`},
		{map[string]string{"z": "1", "a": "2"}, `{"a": "2", "z": "1"}`}, // keys sorted
		{map[string]any{"z": 1, "a": []any{true}}, `{"a": [True], "z": 1}`},
		{[]map[string]any{{"k": "v"}}, `[{"k": "v"}]`},
		{starlark.String("already"), `"already"`},
	}
	for _, tt := range tests {
		v, err := ToValue(tt.in)
		if err != nil {
			t.Errorf("ToValue(%#v): %v", tt.in, err)
			continue
		}
		if v.String() != tt.want {
			t.Errorf("ToValue(%#v) = %s, want %s", tt.in, v, tt.want)
		}
	}
	if _, err := ToValue(map[string]any{"a": []any{struct{}{}}}); err == nil || !strings.Contains(err.Error(), "a: [0]: cannot convert Go value of type struct {}") {
		t.Errorf("unsupported type: got %v", err)
	}
}

func TestFromValue(t *testing.T) {
	cyclic := starlark.NewList(nil)
	_ = cyclic.Append(cyclic)
	shared := starlark.Value(starlark.NewList([]starlark.Value{starlark.MakeInt(1)}))
	for range 60 {
		shared = starlark.NewList([]starlark.Value{shared, shared})
	}
	tests := []struct {
		in   starlark.Value
		want any
		err  string
	}{
		{in: starlark.Bytes("b"), want: "b"},
		{in: starlark.Tuple{starlark.MakeInt(1), starlark.None}, want: []any{int64(1), nil}},
		{in: starlarkstruct.FromStringDict(starlarkstruct.Default, starlark.StringDict{"a": starlark.True}), want: map[string]any{"a": true}},
		{in: starlark.NewSet(1), err: "cannot convert set to data"},
		{in: cyclic, err: "value nested deeper than 256 levels"},
		{in: shared, err: "value too large: more than 16777216 elements"},
	}
	for _, tt := range tests {
		start := time.Now()
		got, err := FromValue(tt.in)
		if d := time.Since(start); d > 30*time.Second { // unbounded: 2^60 elements
			t.Errorf("FromValue(%.40s) took %v", tt.in, d)
		}
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("FromValue(%.40s): got error %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("FromValue(%s) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
}

// TestMeasureIsLowerBound checks that the size estimate used to reject
// oversized results never exceeds the real JSON size.
func TestMeasureIsLowerBound(t *testing.T) {
	docs := []string{
		`null`, `true`, `false`, `"a<b>&\u00e9\n"`, `123456`, `-1`, `0.1`, `[]`, `{}`, `[1,2,3]`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"1"}},"data":{"k":"v"}}`,
	}
	for _, doc := range docs {
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		sv := mustValue(t, v)
		var m measurer
		got := m.measure(sv, 0).bytes
		if real := int64(len(mustJSON(t, v))); got > real {
			t.Errorf("measure(%s) = %d bytes, more than the real %d", doc, got, real)
		}
	}
	// A tuple is a list in JSON.
	var m measurer
	if got := m.measure(starlark.Tuple{starlark.MakeInt(1), starlark.MakeInt(2)}, 0).bytes; got != int64(len("[1,2]")) {
		t.Errorf("measure((1, 2)) = %d, want 5", got)
	}
}

func TestInt64(t *testing.T) {
	if n, err := Int64("replicas", starlark.MakeInt(3)); n != 3 || err != nil {
		t.Errorf("Int64(3) = %d, %v", n, err)
	}
	if _, err := Int64("replicas", starlark.String("3")); err == nil || err.Error() != "replicas: got string, want int" {
		t.Errorf("Int64(string): %v", err)
	}
}
