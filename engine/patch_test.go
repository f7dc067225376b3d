package engine

import "testing"

// MayBeStrategicMerge routes by a patch's first token: only a sequence
// (a JSON6902 patch, block or flow) is certainly not a strategic merge;
// anything else, malformed text included, may be.
func TestMayBeStrategicMerge(t *testing.T) {
	for _, c := range []struct {
		patch string
		want  bool
	}{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", true},
		{"{apiVersion: v1, kind: ConfigMap}", true},
		{"- op: add\n  path: /a\n  value: 1\n", false},
		{"[{op: add, path: /a, value: 1}]", false},
		{"# a comment\n\n---\n  - {op: remove, path: /a}\n", false},
		{"-\n  op: remove\n", false},
		{"-\top: remove\n", false},
		{"--- # a document\n- {op: remove, path: /a}", true}, // "--- #" is not a bare marker: not sure, so maybe
		{"-a: b\n", true}, // a key that starts with a dash
		{"a: [b", true},   // not YAML: evaluating it says why
		{"", true},        // nothing to tell by
		{"# only a comment\n", true},
	} {
		if got := MayBeStrategicMerge(c.patch); got != c.want {
			t.Errorf("MayBeStrategicMerge(%q) = %v, want %v", c.patch, got, c.want)
		}
	}
}
