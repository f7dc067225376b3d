package starlark

import (
	"testing"

	"go.starlark.net/starlark"
)

func TestNearest(t *testing.T) {
	cands := []string{"replicas", "image", "yaml", "len", "decode", "decode_all"}
	for _, c := range []struct{ name, want string }{
		{"replica", "replicas"},
		{"Replicas", "replicas"},
		{"imag", "image"},
		{"yam", "yaml"},
		{"lenn", "len"},
		{"decod", "decode"},
		{"x", ""},          // nothing near
		{"replicas", ""},   // itself is no suggestion
		{"completely", ""}, // too far
		{"decodeall", "decode_all"},
	} {
		if got := Nearest(c.name, cands); got != c.want {
			t.Errorf("Nearest(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestUndefinedSuggestion checks that a typo of a predeclared name or a
// built-in says which one was meant, and that other undefined names do not.
func TestUndefinedSuggestion(t *testing.T) {
	in := New(Options{Predeclared: starlark.StringDict{"yaml": starlark.None}})
	for _, c := range []struct{ src, want string }{
		{"x = yam", "<inline>:1:5: undefined: yam (did you mean yaml?)"},
		{"x = lenn([])", "<inline>:1:5: undefined: lenn (did you mean len?)"},
		{"x = nothing_like_it", "<inline>:1:5: undefined: nothing_like_it"},
	} {
		_, err := in.Load(t.Context(), nil, Script{Inline: []byte(c.src)})
		if errorString(err) != c.want {
			t.Errorf("%s: got %v, want %s", c.src, err, c.want)
		}
	}
}
