package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

const schemaDoc = "../../docs/manifestsync.schema.json"

// TestSchemaUpToDate: docs/manifestsync.schema.json is what engine schema
// prints for the CRD of this tree (run make docs, or this test with
// -update, after changing the API types).
func TestSchemaUpToDate(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"schema"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("engine schema: exit %d: %s", code, stderr.String())
	}
	if *update {
		if err := os.WriteFile(schemaDoc, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(schemaDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, stdout.Bytes()) {
		t.Fatalf("%s is stale: run make docs", schemaDoc)
	}
}

// TestSchemaValidatesSyncFiles validates every example's sync.yaml against
// the schema with a JSON Schema validator, as an editor would, and checks
// that mistakes the CRD rejects are reported.
func TestSchemaValidatesSyncFiles(t *testing.T) {
	f, err := os.Open(schemaDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("manifestsync.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("manifestsync.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	validate := func(y []byte) error {
		j, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			t.Fatal(err)
		}
		return schema.Validate(inst)
	}

	syncs, err := filepath.Glob("../../examples/*/sync.yaml")
	if err != nil || len(syncs) < 2 {
		t.Fatalf("found %d examples: %v", len(syncs), err)
	}
	for _, p := range syncs {
		if local := filepath.Join(filepath.Dir(p), localSync); fileExists(local) {
			p = local // sync.yaml uses a field this build lacks; TestExamples checks that
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(b); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}

	good := `apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: app
    git: {url: "https://git.example.com/web.git", ref: {branch: main}}
  targets:
  - name: dev
    namespace: web-dev
`
	if err := validate([]byte(good)); err != nil {
		t.Fatalf("a valid file fails: %v", err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"unknown spec field", "  targets:", "  targetz: []\n  targets:", "targetz"},
		{"unknown source field", "name: app\n", "name: app\n    gti: {}\n", "gti"},
		{"wrong kind", "kind: ManifestSync", "kind: ManifestSink", "kind"},
		{"wrong apiVersion", "v1alpha1", "v1", "apiVersion"},
		{"wrong type", "namespace: web-dev", "namespace: [web-dev]", "namespace"},
		{"missing target name", "  - name: dev\n    namespace", "  - namespace", "name"},
		{"no metadata", "metadata: {name: web, namespace: platform}\n", "", "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.old, tc.new, 1)
			if bad == good {
				t.Fatalf("%q not in the file", tc.old)
			}
			err := validate([]byte(bad))
			if err == nil {
				t.Fatalf("no error for:\n%s", bad)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}
}
