package stdlib

import (
	"strings"
	"testing"
	"time"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// FuzzYAMLDecode checks that decoding arbitrary text never panics, and that
// whatever decodes converts to Starlark and encodes again.
func FuzzYAMLDecode(f *testing.F) {
	for _, seed := range []string{
		"", "a: 1", "- [1, {a: b}]\n- &x y\n- *x", "---\n---\nk: v\n---\n",
		"a: !!binary aGVsbG8=", "? [a]\n: b", "a: 1\na: 2", "{", "--- |\n  text",
		"n: 1e400", "t: 2024-01-01", "x: .inf",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := decodeYAML([]byte(s))
		if err == nil {
			sv, err := lstar.ToValue(v)
			if err != nil {
				t.Fatalf("decoded %q to %#v, which does not convert: %v", s, v, err)
			}
			if _, err := encodeYAML(sv); err != nil {
				t.Fatalf("decoded %q but cannot encode it: %v", s, err)
			}
		}
		if _, err := decodeYAMLStream([]byte(s)); err != nil {
			return
		}
	})
}

// TestYAMLBomb checks that alias expansion ("billion laughs") is bounded.
func TestYAMLBomb(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("a: &a [x,x,x,x,x,x,x,x,x,x]\n")
	for i := 'b'; i <= 'j'; i++ {
		prev := string(i - 1)
		sb.WriteString(string(i) + ": &" + string(i) + " [" + strings.Repeat("*"+prev+",", 9) + "*" + prev + "]\n")
	}
	start := time.Now()
	_, err := decodeYAML([]byte(sb.String()))
	if err == nil {
		t.Error("a billion-laughs document decoded without error")
	}
	// Unrejected, it would expand to a billion nodes: no end in sight.
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("rejecting a billion-laughs document took %v", d)
	}
}
