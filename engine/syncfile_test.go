package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/engine"
)

func TestLoadSyncFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // each must appear in the error
	}{{
		name: "unknown field",
		yaml: `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: x}
spec:
  targets:
  - name: dev
    namespce: dev
`,
		want: []string{"f.yaml:7: spec.targets[0].namespce: unknown field"},
	}, {
		name: "wrong type",
		yaml: `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: x}
spec:
  targets: {name: dev}
`,
		want: []string{"f.yaml:5: spec.targets: got an object, want a list"},
	}, {
		name: "scalar type",
		yaml: `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: x}
spec:
  suspend: maybe
  targets: [{name: dev}]
`,
		want: []string{"f.yaml:5: spec.suspend: got string, want bool"},
	}, {
		name: "rules",
		yaml: `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: x}
spec:
  sources:
  - name: a
  - name: a
    git: {url: x}
  transform:
    starlark: {source: b, path: x.star}
  targets:
  - name: dev
    namespace: x
    namespaceSelector: {}
  policy: {resources: Steal}
`,
		want: []string{
			"f.yaml:6: spec.sources[0]: exactly one of git, oci, http, object, objects, kustomize and helm must be set",
			`f.yaml:7: spec.sources[1].name: duplicate source name "a"`,
			`f.yaml:10: spec.transform.starlark.source: no source named "b"`,
			"f.yaml:12: spec.targets[0]: namespace and namespaceSelector are exclusive",
			`f.yaml:15: spec.policy.resources: "Steal" is not one of`,
		},
	}, {
		name: "no targets",
		yaml: "apiVersion: manifestsync.dev/v1alpha1\nkind: ManifestSync\nmetadata: {name: x}\nspec: {}\n",
		want: []string{"f.yaml:4: spec.targets: at least one target is needed"},
	}, {
		name: "none",
		yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		want: []string{"f.yaml: no ManifestSync"},
	}, {
		name: "not yaml",
		yaml: "a: [\n",
		want: []string{"f.yaml: yaml: line"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.LoadSyncFile("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadSyncFileFieldErrors(t *testing.T) {
	_, err := engine.LoadSyncFile("f.yaml", []byte("apiVersion: manifestsync.dev/v1alpha1\nkind: ManifestSync\nspec:\n  bogus: 1\n  targets: [{name: dev}]\n"))
	var fe engine.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Line != 4 || fe[0].Field != "spec.bogus" {
		t.Fatalf("got %#v", err)
	}
}

// TestUnknownFieldSuggestion: an unknown field that is a typo of a field
// of its object, at any depth, says which one it likely is; one that is
// no typo of any says nothing more.
func TestUnknownFieldSuggestion(t *testing.T) {
	_, err := engine.LoadSyncFile("f.yaml", []byte(`apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: x, namespce: platform}
spec:
  sources:
  - name: app
    git: {url: https://git.example.com/web.git, rev: {branch: main}}
  - name: tls
    objct: {apiVersion: v1, kind: Secret, name: tls}
  target: []
  targets:
  - name: dev
    namespace: dev
    param: {replicas: 1}
    patches: [{patch: x, targte: {kind: Deployment}}]
  policy: {prun: true}
  wibble: 1
`))
	want := []string{
		`f.yaml:3: metadata.namespce: unknown field (did you mean "namespace"?)`,
		`f.yaml:7: spec.sources[0].git.rev: unknown field (did you mean "ref"?)`,
		`f.yaml:9: spec.sources[1].objct: unknown field (did you mean "object"?)`,
		`f.yaml:10: spec.target: unknown field (did you mean "targets"?)`,
		`f.yaml:14: spec.targets[0].param: unknown field (did you mean "params"?)`,
		`f.yaml:15: spec.targets[0].patches[0].targte: unknown field (did you mean "target"?)`,
		`f.yaml:16: spec.policy.prun: unknown field (did you mean "prune"?)`,
		`f.yaml:17: spec.wibble: unknown field`,
	}
	var fe engine.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want FieldErrors", err)
	}
	var got []string
	for _, e := range fe {
		got = append(got, e.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSuggestField finds the field an unknown field's path (as the CRD's
// validation names it) is likely a typo of.
func TestSuggestField(t *testing.T) {
	for path, want := range map[string]string{
		"spec.target":                       "targets",
		"spc":                               "spec",
		"spec.targets[0].replica":           "",
		"spec.targets[0].param":             "params",
		"spec.sources[2].git.rev":           "ref",
		"spec.sources[0].git.ref.brnch":     "branch",
		"spec.targets[1].patches[0].targte": "target",
		"spec.wibble":                       "",
		"spec.params.replica":               "", // free-form
		"spec.nosuch.field":                 "",
		"spec.targets[0].labels.x":          "", // a map
		"metadata.labls":                    "labels",
	} {
		if got := engine.SuggestField(path); got != want {
			t.Errorf("SuggestField(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestLoadSyncFiles(t *testing.T) {
	files, err := engine.LoadSyncFiles("f.yaml", []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: skipped}
---
apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: one}
spec:
  params: {free: {form: [1, 2]}}
  targets: [{name: dev, namespace: dev}]
---
apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: two}
spec:
  targets: [{name: dev}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Sync.Name != "one" || files[1].Sync.Name != "two" {
		t.Fatalf("got %d files", len(files))
	}
	if got := string(files[0].Sync.Spec.Params.Raw); got != `{"free":{"form":[1,2]}}` {
		t.Errorf("params = %s", got)
	}
	if line := files[0].Line("spec.targets[0].namespace"); line != 10 {
		t.Errorf("line = %d, want 10", line)
	}
}
