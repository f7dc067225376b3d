package engine_test

import (
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/engine"
)

const fieldLineDoc = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
    "needs: quoting": x
    'single#quoted': y
  annotations: {example.com/owner: team-a, "a]b": z}
spec:
  sources:
  - name: app
    git: {url: x}
  - name: tls
    object:
      kind: Secret
  targets: &targets
  - name: dev
    namespaces:
    - web-dev
    - web-qa
  - [one, two]
  - {name: flow,
     namespace: flow-ns}
  params:
    nested:
      deeper:
        leaf: 1
  copy: *targets
`

// TestFieldLine is the one finder of field lines, shared by engine (for a
// ManifestSync that loads) and engine vet (for one that breaks the CRD).
func TestFieldLine(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(fieldLineDoc), &n); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		want  int
	}{
		{"", 1},
		{"kind", 2},
		{"metadata.labels", 5},
		{"metadata.labels[app.kubernetes.io/name]", 6},
		{"metadata.labels[needs: quoting]", 7},
		{"metadata.labels[single#quoted]", 8},
		{"metadata.annotations[example.com/owner]", 9},
		{`metadata.annotations["a]b"]`, 9},
		{"metadata.labels[absent.example/key]", 5}, // absent: its parent
		{"spec", 10},
		{"spec.sources", 11},
		{"spec.sources[0]", 12},
		{"spec.sources[1].object.kind", 16},
		{"spec.sources[1].object.name", 15}, // absent: its parent
		{"spec.sources[7]", 11},
		{"spec.sources[-1]", 11},
		{"spec.targets", 17},
		{"spec.targets[0].name", 18},
		{"spec.targets[0].namespaces[1]", 21},
		{"spec.targets[1][1]", 22},
		{"spec.targets[2].namespace", 24},
		{"spec.params.nested.deeper.leaf", 28},
		{"spec.copy[0].namespaces[0]", 20}, // through the alias
	} {
		if got := engine.FieldLine(&n, tc.field); got != tc.want {
			t.Errorf("FieldLine(%q) = %d, want %d", tc.field, got, tc.want)
		}
		if got := engine.FieldLine(n.Content[0], tc.field); got != tc.want {
			t.Errorf("FieldLine(root, %q) = %d, want %d", tc.field, got, tc.want)
		}
	}
}

func TestSplitFieldPath(t *testing.T) {
	for field, want := range map[string][]string{
		"":                         nil,
		"spec.targets[1].params":   {"spec", "targets", "1", "params"},
		"metadata.labels[a.b/c]":   {"metadata", "labels", "a.b/c"},
		`data["a]b"].x`:            {"data", "a]b", "x"},
		"spec.targets[0][1]":       {"spec", "targets", "0", "1"},
		"metadata.labels[unclosed": {"metadata", "labels", "unclosed"},
	} {
		if got := engine.SplitFieldPath(field); !slices.Equal(got, want) {
			t.Errorf("SplitFieldPath(%q) = %q, want %q", field, got, want)
		}
	}
}

// TestSyncFileLineBracketedKey: SyncFile.Line used to split
// "metadata.labels[app.kubernetes.io/name]" at its dots and answer the line
// of labels (and of a map's first key for any map), unlike engine vet.
func TestSyncFileLineBracketedKey(t *testing.T) {
	const doc = `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata:
  name: web
  namespace: platform
  labels:
    team: a
    app.kubernetes.io/name: web
spec:
  sources:
  - name: app
    git: {url: https://example.com/app.git}
  targets:
  - name: dev
    namespace: web-dev
`
	f, err := engine.LoadSyncFile("sync.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]int{
		"metadata.labels[app.kubernetes.io/name]": 8,
		"metadata.labels":                         6,
		"spec.targets":                            13,
		"spec.targets[0].namespace":               15,
	} {
		if got := f.Line(field); got != want {
			t.Errorf("Line(%q) = %d, want %d", field, got, want)
		}
	}
}
