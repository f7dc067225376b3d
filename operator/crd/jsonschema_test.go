package crd

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestToJSONSchema: the OpenAPI extensions JSON Schema has no word for
// become JSON Schema, or are left out.
func TestToJSONSchema(t *testing.T) {
	var in, want map[string]any
	for s, v := range map[string]*map[string]any{
		`{"type": "object", "x-kubernetes-validations": [{"rule": "true"}], "properties": {
			"strict": {"type": "object", "properties": {"a": {"type": "string", "nullable": true}}},
			"open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
			"port": {"x-kubernetes-int-or-string": true},
			"list": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
			"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}`: &in,
		`{"type": "object", "additionalProperties": false, "properties": {
			"strict": {"type": "object", "additionalProperties": false, "properties": {"a": {"type": ["string", "null"]}}},
			"open": {"type": "object"},
			"port": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
			"list": {"type": "array", "items": {"type": "object", "additionalProperties": false, "properties": {"k": {"type": "string"}}}},
			"labels": {"type": "object", "additionalProperties": {"type": "string"}}}}`: &want,
	} {
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatal(err)
		}
	}
	if got := toJSONSchema(in); !reflect.DeepEqual(got, want) {
		b, _ := json.MarshalIndent(got, "", "  ")
		t.Fatalf("got:\n%s", b)
	}
}
