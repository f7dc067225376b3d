package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/stdlib"
)

// Fuzz targets for every parser of untrusted text the engine has. Their
// seed corpora are in testdata/fuzz/NAME; plain `go test` runs them, and
// `make fuzz` explores from them.

// fuzzDeadline bounds one input; parsers must not take longer, whatever
// they are given.
const fuzzDeadline = 5 * time.Second

// maxErrorLen bounds an error message: errors end up in conditions and
// events, so an input must not be able to blow them up.
const maxErrorLen = 4096

func checkTime(t *testing.T, start time.Time) {
	t.Helper()
	if d := time.Since(start); d > fuzzDeadline {
		t.Errorf("took %v", d)
	}
}

func checkError(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if msg == "" || len(msg) > maxErrorLen {
		t.Errorf("error of %d bytes: %.200q", len(msg), msg)
	}
}

// FuzzDecodeDocuments: decoding never panics, stays within the alias
// budget, returns only JSON-shaped values, and what it returns encodes as
// JSON and decodes (JSON is YAML) to the same values.
func FuzzDecodeDocuments(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		docs, err := DecodeDocuments(data)
		checkTime(t, start)
		if err != nil {
			checkError(t, err)
			return
		}
		for _, d := range docs {
			if d.Value == nil {
				t.Fatalf("line %d: an empty document was kept", d.Line)
			}
			if d.Line < 1 || d.Line > bytes.Count(data, []byte("\n"))+1 {
				t.Errorf("line %d of %d", d.Line, bytes.Count(data, []byte("\n"))+1)
			}
			if n := countNodes(t, d.Value); n > stdlib.YAMLBudget(len(data)) {
				t.Errorf("line %d: %d nodes, over the budget of %d", d.Line, n, stdlib.YAMLBudget(len(data)))
			}
			enc, err := json.Marshal(d.Value)
			if err != nil {
				t.Fatalf("line %d: %v", d.Line, err)
			}
			again, err := DecodeDocuments(enc)
			if err != nil || len(again) != 1 {
				t.Fatalf("line %d: %s does not decode again: %v", d.Line, enc, err)
			}
			if enc2, _ := json.Marshal(again[0].Value); !bytes.Equal(enc, enc2) {
				t.Errorf("round trip:\n%s\n%s", enc, enc2)
			}
		}
	})
}

// countNodes counts the values of v, failing on any type that is not JSON.
func countNodes(t *testing.T, v any) int {
	switch v := v.(type) {
	case map[string]any:
		n := 1
		for _, e := range v {
			n += countNodes(t, e)
		}
		return n
	case []any:
		n := 1
		for _, e := range v {
			n += countNodes(t, e)
		}
		return n
	case nil, string, bool, int64, float64:
		return 1
	}
	t.Fatalf("%T is not JSON-shaped", v)
	return 0
}

// FuzzLoadSyncFiles: loading never panics; an error names the file; a
// ManifestSync that loads passes Validate, has lines inside the file, and
// loads again from its own JSON encoding to the same spec.
func FuzzLoadSyncFiles(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		files, err := LoadSyncFiles("sync.yaml", data)
		checkTime(t, start)
		if err != nil {
			checkError(t, err)
			if !strings.Contains(err.Error(), "sync.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
			var fe FieldErrors
			if errors.As(err, &fe) {
				for _, e := range fe {
					if e.File != "sync.yaml" || e.Line < 0 {
						t.Errorf("field error at %s:%d", e.File, e.Line)
					}
				}
			}
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, sf := range files {
			if sf.Sync == nil {
				t.Fatal("a ManifestSync without its resource")
			}
			if errs := Validate(&sf.Sync.Spec); len(errs) > 0 {
				t.Errorf("loaded, yet invalid: %v", errs)
			}
			for _, field := range []string{"spec", "spec.targets[0]", "spec.targets[0].patches[0].patch", "spec.sources[3].git.url"} {
				if l := sf.Line(field); l < 1 || l > lines {
					t.Errorf("%s at line %d of %d", field, l, lines)
				}
			}
			enc, err := json.Marshal(sf.Sync)
			if err != nil {
				t.Fatal(err)
			}
			again, err := LoadSyncFile("sync.json", enc)
			if err != nil {
				t.Fatalf("its own encoding does not load: %v\n%s", err, enc)
			}
			if enc2, _ := json.Marshal(again.Sync); !bytes.Equal(enc, enc2) {
				t.Errorf("round trip:\n%s\n%s", enc, enc2)
			}
		}
	})
}

// fuzzObjects are what patches are tried on.
func fuzzObjects() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "dev", "labels": map[string]any{"app": "web", "tier": "front"}},
			"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "web:1"}}}}}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "front", "annotations": map[string]any{"a": "b"}}, "data": map[string]any{"MODE": "dev"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}, "data": map[string]any{"k": "dg=="}}},
	}
}

// FuzzPatch: parsing a patch and its selector never panics; a selector's
// name and namespace match whole names only; applying the patch is
// deterministic, leaves the objects JSON-shaped, and fails only with an
// error naming the object or saying nothing matched.
func FuzzPatch(f *testing.F) {
	f.Fuzz(func(t *testing.T, text, kind, name, namespace, labelSel, annSel string) {
		start := time.Now()
		defer checkTime(t, start)
		var target *v1alpha1.PatchSelector
		if kind+name+namespace+labelSel+annSel != "" {
			target = &v1alpha1.PatchSelector{Kind: kind, Name: name, Namespace: namespace, LabelSelector: labelSel, AnnotationSelector: annSel}
		}
		p, err := parsePatch(v1alpha1.Patch{Patch: text, Target: target})
		if err != nil {
			checkError(t, err)
			return
		}
		if (p.merge == nil) == (p.ops == nil) {
			t.Fatalf("a patch is a merge or operations, got %+v", p)
		}
		if target != nil {
			checkAnchored(t, p.sel.name, name)
			checkAnchored(t, p.sel.ns, namespace)
		}
		var results [2][]*unstructured.Unstructured
		var errs [2]error
		for i := range results {
			results[i] = fuzzObjects()
			errs[i] = p.apply(results[i])
		}
		if (errs[0] == nil) != (errs[1] == nil) || !reflect.DeepEqual(results[0], results[1]) {
			t.Fatalf("not deterministic: %v, %v", errs[0], errs[1])
		}
		if errs[0] != nil {
			checkError(t, errs[0])
			msg := errs[0].Error()
			if !errors.Is(errs[0], errNoMatch) && !strings.HasPrefix(msg, "Deployment ") && !strings.HasPrefix(msg, "ConfigMap ") && !strings.HasPrefix(msg, "Secret ") {
				t.Errorf("error names no object: %v", errs[0])
			}
			return
		}
		for _, o := range results[0] {
			countNodes(t, o.Object)
		}
	})
}

// checkAnchored checks that re, compiled from pattern, matches what the
// pattern matches as a whole, on a few names.
func checkAnchored(t *testing.T, re *regexp.Regexp, pattern string) {
	t.Helper()
	if re == nil {
		return
	}
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		t.Fatalf("%q compiled, yet does not parse: %v", pattern, err)
	}
	whole := regexp.MustCompile(`^(?:` + parsed.String() + `)$`)
	for _, s := range []string{"", "web", "front", "dev", "s", pattern, "x" + pattern, pattern + "x"} {
		if re.MatchString(s) != whole.MatchString(s) {
			t.Errorf("pattern %q on %q: %v, want %v", pattern, s, re.MatchString(s), whole.MatchString(s))
		}
	}
}

// TestSelectorAnchored checks the bug FuzzPatch found: a name pattern that
// closes the anchoring group matched every name.
func TestSelectorAnchored(t *testing.T) {
	if _, err := compileSelector(&v1alpha1.PatchSelector{Name: "a)|(.*"}); err == nil {
		t.Error(`name "a)|(.*" compiled`)
	}
	sel, err := compileSelector(&v1alpha1.PatchSelector{Name: "we.|x"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"web": true, "x": true, "webx": false, "xweb": false} {
		if got := sel.name.MatchString(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}
