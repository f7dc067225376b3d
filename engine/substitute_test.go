package engine

import (
	"strings"
	"testing"
	"time"
)

// A hostile variable: a value of 10 MiB substituted once is bounded only
// by MaxBytes, as any other input; named in many places it would make
// gigabytes, and fails once what the values add passes MaxBytes, before
// that memory is taken.
func TestSubstituteBoundsWhatValuesAdd(t *testing.T) {
	big := strings.Repeat("x", 10<<20)
	vars := map[string]string{"big": big}
	obj := func(refs int) []Input {
		data := map[string]any{}
		for i := range refs {
			data["k"+string(rune('a'+i%26))+strings.Repeat("z", i/26)] = "${big}"
		}
		return []Input{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm"}, "data": data}}}
	}
	once := obj(1)
	if err := substitute("app", once, vars, 64<<20); err != nil {
		t.Fatalf("one 10 MiB value: %v", err)
	}
	if got := once[0].Object["data"].(map[string]any)["ka"]; got != big {
		t.Errorf("the value was not substituted whole (%d bytes)", len(got.(string)))
	}
	start := time.Now()
	err := substitute("app", obj(1000), vars, 64<<20)
	if err == nil || !strings.Contains(err.Error(), `source "app": ConfigMap cm: substitution adds more than 67108864 bytes to the objects`) {
		t.Errorf("a 10 MiB value named 1,000 times: %v", err)
	}
	// 1,000 substitutions would be 10 GiB; the refusal comes after 7.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	t.Logf("refused in %s", time.Since(start))
}
