package main

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
)

func secretObject(pw string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "web", "annotations": map[string]any{"copy": "pw=" + pw}},
		"data":     map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(pw)), "user": "YXBw"},
	}}
}

func configMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "web"},
		"data":     data,
	}}
}

// TestDiffResults compares two renders of one ManifestSync: objects added,
// removed and changed by target, a ManifestSync on one side only all
// added, a failed target an error; no Secret value of either side in any
// diff or error, wherever it is copied, while a Secret's changed values
// still show as changed.
func TestDiffResults(t *testing.T) {
	red := redact.New()
	for _, pw := range []string{"old-password", "new-password"} {
		red.AddObject(secretObject(pw).Object)
	}
	before := &engine.Result{Targets: []*engine.TargetResult{
		{Name: "dev", Objects: []*unstructured.Unstructured{secretObject("old-password"), configMap("gone", map[string]any{"a": "1"}), configMap("same", map[string]any{"a": "1"})}},
		{Name: "prod", Err: errors.New(`target "prod": bad value "old-password"`)},
	}}
	after := &engine.Result{Targets: []*engine.TargetResult{
		{Name: "dev", Objects: []*unstructured.Unstructured{secretObject("new-password"), configMap("new", map[string]any{"dsn": "x:new-password@db"}), configMap("same", map[string]any{"a": "1"})}},
		{Name: "prod"},
	}}
	targets, err := diffResults(before, after, red)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 2 {
		t.Fatalf("got %d targets, want 2", len(targets))
	}
	dev, prod := targets[0], targets[1]
	if dev.Added != 1 || dev.Removed != 1 || dev.Changed != 1 || len(dev.Objects) != 3 {
		t.Errorf("dev: +%d -%d ~%d, %d objects; want +1 -1 ~1, 3 objects", dev.Added, dev.Removed, dev.Changed, len(dev.Objects))
	}
	var all strings.Builder
	for _, o := range dev.Objects {
		all.WriteString(o.Diff)
	}
	text := all.String() + prod.Error
	for _, leak := range []string{"old-password", "new-password", base64.StdEncoding.EncodeToString([]byte("old-password")), base64.StdEncoding.EncodeToString([]byte("new-password"))} {
		if strings.Contains(text, leak) {
			t.Errorf("%q in the diffs:\n%s", leak, text)
		}
	}
	for _, want := range []string{
		"-  password: '*** (before)'\n+  password: '*** (after)'\n", // changed, told apart
		"   user: '***'\n",   // unchanged
		"+  dsn: x:***@db\n", // into another object
		"--- base/dev/ConfigMap web/gone\n+++ worktree/dev/ConfigMap web/gone\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the diffs:\n%s", want, text)
		}
	}
	if prod.Error != `base: target "prod": bad value "***"` || len(prod.Objects) != 0 {
		t.Errorf("prod: error %q, %d objects", prod.Error, len(prod.Objects))
	}

	// A ManifestSync only in the working tree: all added.
	targets, err = diffResults(nil, after, red)
	if err != nil {
		t.Fatal(err)
	}
	if targets[0].Added != 3 || targets[0].Changed+targets[0].Removed != 0 {
		t.Errorf("new ManifestSync: +%d -%d ~%d, want +3", targets[0].Added, targets[0].Removed, targets[0].Changed)
	}
	var secret string
	for _, o := range targets[0].Objects {
		if strings.HasPrefix(o.Object, "Secret ") {
			secret = o.Diff
		}
	}
	// A Secret's value copied outside its data is masked too.
	if !strings.Contains(secret, "+    copy: pw=***\n") || strings.Contains(secret, "new-password") {
		t.Errorf("the added Secret's diff:\n%s", secret)
	}
}
