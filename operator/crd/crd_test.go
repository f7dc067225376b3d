package crd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/operator/config"
)

// TestCRDIsValid validates the embedded CRD as the API server validates a
// CustomResourceDefinition on create: the schema is structural, defaults are
// pruned and valid, and every CEL rule compiles within the per-rule and
// per-CRD cost budgets.
func TestCRDIsValid(t *testing.T) {
	for _, e := range validateCRD(t, config.ManifestSyncCRD) {
		t.Errorf("the API server would reject the CRD: %v", e)
	}
	if _, err := ManifestSync(); err != nil {
		t.Fatal(err)
	}
}

// TestCRDValidationCatchesBadRules makes sure TestCRDIsValid would fail on a
// rule that does not compile or costs too much.
func TestCRDValidationCatchesBadRules(t *testing.T) {
	const rule = "rule: has(self.source) != has(self.builtin)"
	if !strings.Contains(string(config.ManifestSyncCRD), rule) {
		t.Fatalf("the CRD has no rule %q to break", rule)
	}
	for bad, want := range map[string]string{
		"rule: has(self.source) != has(self.nope)": "undefined field 'nope'",
		// Unbounded strings split and matched pairwise, in 32 items: too costly.
		"rule: self.path.split('/').all(a, self.source.split('/').all(b, a.matches(b)))": "estimated rule cost exceeds budget",
	} {
		errs := validateCRD(t, []byte(strings.Replace(string(config.ManifestSyncCRD), rule, bad, 1)))
		if !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("with %q: errors %v, want one containing %q", bad, errs, want)
		}
	}
}

// validateCRD decodes a CRD, defaults it and validates it as the API server
// does on create.
func validateCRD(t *testing.T, b []byte) field.ErrorList {
	t.Helper()
	crd, err := decodeCRD(b)
	if err != nil {
		t.Fatal(err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			// Set by the registry's PrepareForCreate.
			crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
		}
	}
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		t.Fatal(err)
	}
	return apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), internal)
}

// valid is a ManifestSync the API server accepts; each case of
// TestValidate edits a copy.
const valid = `
apiVersion: manifestsync.dev/v1alpha1
kind: ManifestSync
metadata: {name: web, namespace: platform}
spec:
  sources:
  - name: app
    git: {url: https://git.example.com/web.git}
  - name: base
    kustomize: {source: app, path: overlays/prod}
  transform:
    starlark: {source: app, path: main.star}
  targets:
  - name: dev
    namespace: web-dev
    params: {replicas: 1}
`

func TestValidate(t *testing.T) {
	v, err := ManifestSync()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(obj map[string]any)
		want []string // "field rule substring", in any order
	}{
		{name: "valid", edit: func(map[string]any) {}},
		{
			name: "no namespace",
			edit: func(obj map[string]any) { delete(meta(obj), "namespace") },
		},
		{
			name: "git and object",
			edit: func(obj map[string]any) {
				source(obj, 0)["object"] = map[string]any{"apiVersion": "v1", "kind": "Secret", "name": "x"}
			},
			want: []string{"spec.sources[0] crd/cel exactly one of git, oci, http, object, objects, kustomize and helm must be set"},
		},
		{
			name: "object set",
			edit: func(obj map[string]any) {
				delete(source(obj, 0), "git")
				source(obj, 0)["objects"] = map[string]any{"apiVersion": "v1", "kind": "Secret", "namespace": "platform",
					"labelSelector": map[string]any{"matchLabels": map[string]any{"replicate": "yes"}}, "exclude": []any{"internal-.*"}}
			},
		},
		{
			name: "object set rules",
			edit: func(obj map[string]any) {
				delete(source(obj, 0), "git")
				source(obj, 0)["objects"] = map[string]any{"kind": "Secret", "kinds": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
					"namespace": "a", "namespaceSelector": map[string]any{}}
			},
			want: []string{
				"spec.sources[0].objects crd/cel apiVersion and kind are set together",
				"spec.sources[0].objects crd/cel kind and kinds are exclusive",
				"spec.sources[0].objects crd/cel namespace and namespaceSelector are exclusive",
			},
		},
		{
			name: "object set of a remote cluster",
			edit: func(obj map[string]any) {
				delete(source(obj, 0), "git")
				source(obj, 0)["objects"] = map[string]any{"namespace": "shop"}
				source(obj, 0)["cluster"] = map[string]any{"kubeConfigSecretRef": map[string]any{"name": "primary"}}
			},
		},
		{
			name: "cluster of a git source",
			edit: func(obj map[string]any) {
				source(obj, 0)["cluster"] = map[string]any{"kubeConfigSecretRef": map[string]any{"name": "primary"}}
			},
			want: []string{"spec.sources[0] crd/cel cluster is set only with object or objects"},
		},
		{
			name: "remote target with a namespaceSelector",
			edit: func(obj map[string]any) {
				delete(target(obj, 0), "namespace")
				target(obj, 0)["namespaceSelector"] = map[string]any{"matchLabels": map[string]any{"dr": "yes"}}
				target(obj, 0)["cluster"] = map[string]any{"kubeConfigSecretRef": map[string]any{"name": "dr"}}
			},
		},
		{
			name: "whole namespace by selector",
			edit: func(obj map[string]any) {
				delete(source(obj, 0), "git")
				source(obj, 0)["objects"] = map[string]any{"namespaceSelector": map[string]any{}}
			},
			want: []string{"spec.sources[0].objects crd/cel the whole-namespace form (no kind, no kinds) reads one namespace: set namespace, not namespaceSelector"},
		},
		{
			name: "oci, http and decryption",
			edit: func(obj map[string]any) {
				delete(source(obj, 0), "git")
				source(obj, 0)["oci"] = map[string]any{"url": "oci://127.0.0.1:5000/app", "ref": map[string]any{"semver": ">=1.0", "semverFilter": ".*"},
					"layerSelector": map[string]any{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "operation": "copy"},
					"verify":        map[string]any{"provider": "cosign", "secretRef": map[string]any{"name": "cosign-pub"}}}
				spec(obj)["sources"] = append(spec(obj)["sources"].([]any), map[string]any{"name": "archive",
					"http": map[string]any{"url": "https://example.com/a.tgz", "digest": "sha256:" + strings.Repeat("ab", 32)}})
				spec(obj)["decryption"] = map[string]any{"provider": "sops", "secretRef": map[string]any{"name": "sops-age"}}
			},
		},
		{
			name: "oci, http and decryption rules",
			edit: func(obj map[string]any) {
				source(obj, 0)["git"].(map[string]any)["verify"] = map[string]any{"mode": "Commit", "secretRef": map[string]any{"name": "keys"}}
				spec(obj)["sources"] = append(spec(obj)["sources"].([]any),
					map[string]any{"name": "artifact", "oci": map[string]any{"url": "https://registry/app", "ref": map[string]any{"digest": "sha256:12"}}})
				spec(obj)["decryption"] = map[string]any{"provider": "vault"}
			},
			want: []string{
				`spec.sources[0].git.verify.mode crd/schema Unsupported value: "Commit"`,
				`spec.sources[2].oci.url crd/schema Invalid value: "https://registry/app"`,
				`spec.sources[2].oci.ref.digest crd/schema Invalid value: "sha256:12"`,
				`spec.decryption.provider crd/schema Unsupported value: "vault"`,
				"spec.decryption.secretRef crd/schema Required value",
				" crd/cel some validation rules were not checked",
			},
		},
		{
			name: "http without a digest",
			edit: func(obj map[string]any) {
				spec(obj)["sources"] = append(spec(obj)["sources"].([]any),
					map[string]any{"name": "archive", "http": map[string]any{"url": "https://example.com/a.tgz"}},
					map[string]any{"name": "plain", "http": map[string]any{"url": "http://example.com/a.tgz", "insecure": true}})
			},
			want: []string{"spec.sources[2].http crd/cel digest is required unless insecure is true"},
		},
		{
			name: "unknown fields",
			edit: func(obj map[string]any) {
				target(obj, 0)["replica"] = 3
				meta(obj)["nme"] = "x"
			},
			want: []string{
				`spec.targets[0].replica crd/unknown-field unknown field "spec.targets[0].replica"`,
				`metadata.nme crd/unknown-field unknown field "metadata.nme"`,
			},
		},
		{
			name: "enum",
			edit: func(obj map[string]any) { spec(obj)["policy"] = map[string]any{"resources": "Steal"} },
			want: []string{
				`spec.policy.resources crd/schema Unsupported value: "Steal"`,
				" crd/cel some validation rules were not checked",
			},
		},
		{
			name: "wrong type skips CEL",
			edit: func(obj map[string]any) { spec(obj)["targets"] = "dev" },
			want: []string{
				"spec.targets crd/schema Invalid value: \"string\": spec.targets in body must be of type array",
				" crd/cel some validation rules were not checked",
			},
		},
		{
			name: "duplicate source names",
			edit: func(obj map[string]any) { source(obj, 1)["name"] = "app"; delete(source(obj, 1), "kustomize") },
			want: []string{
				`spec.sources[1] crd/list-type Duplicate value: {"name":"app"}`,
				"spec.sources[1] crd/cel exactly one of git, oci, http, object, objects, kustomize and helm",
			},
		},
		{
			name: "transform names a missing source",
			edit: func(obj map[string]any) {
				spec(obj)["transform"] = map[string]any{"starlark": map[string]any{"source": "nope", "path": "x.star"}}
			},
			want: []string{"spec crd/cel transform.starlark.source must name a source"},
		},
		{
			name: "bad name",
			edit: func(obj map[string]any) { meta(obj)["name"] = "Web_1" },
			want: []string{"metadata.name crd/metadata Invalid value: \"Web_1\""},
		},
		{
			name: "wrong apiVersion",
			edit: func(obj map[string]any) { obj["apiVersion"] = "manifestsync.dev/v1" },
			want: []string{`apiVersion crd/type Invalid value: "manifestsync.dev/v1": must be manifestsync.dev/v1alpha1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := map[string]any{}
			if err := yaml.Unmarshal([]byte(valid), &obj); err != nil {
				t.Fatal(err)
			}
			tt.edit(obj)
			before, _ := yaml.Marshal(obj)
			_, errs, err := v.Validate(context.Background(), obj)
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := yaml.Marshal(obj); string(after) != string(before) {
				t.Errorf("Validate modified its argument")
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Field+" "+e.Rule+" "+e.Msg)
			}
			for _, w := range tt.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("no error %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%s", len(got), len(tt.want), strings.Join(got, "\n"))
			}
		})
	}
}

// TestValidateDefaults checks that the returned object is what the API
// server stores: defaults filled, status dropped.
func TestValidateDefaults(t *testing.T) {
	v, err := ManifestSync()
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(valid), &obj); err != nil {
		t.Fatal(err)
	}
	obj["status"] = map[string]any{"observedGeneration": 3}
	spec(obj)["policy"] = map[string]any{} // defaults apply inside objects that exist
	got, errs, err := v.Validate(context.Background(), obj)
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	if _, ok := got["status"]; ok {
		t.Errorf("status kept on create")
	}
	policy, _ := spec(got)["policy"].(map[string]any)
	if policy["resources"] != "Sync" || policy["prune"] != true || spec(got)["interval"] != "10m" {
		t.Errorf("defaults not filled: policy %v, interval %v", policy, spec(got)["interval"])
	}
	if p := target(got, 0)["params"]; p.(map[string]any)["replicas"] != int64(1) {
		t.Errorf("params = %#v, want replicas int64(1)", p)
	}
}

func meta(obj map[string]any) map[string]any { return obj["metadata"].(map[string]any) }
func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }
func source(obj map[string]any, i int) map[string]any {
	return spec(obj)["sources"].([]any)[i].(map[string]any)
}
func target(obj map[string]any, i int) map[string]any {
	return spec(obj)["targets"].([]any)[i].(map[string]any)
}

// kubectl get msync shows Ready, Targets, Revision and Age; -o wide adds
// Suspended, Last sync, the replica under sharding and the Ready message
// (priority 1).
func TestPrinterColumns(t *testing.T) {
	crd, err := decodeCRD(config.ManifestSyncCRD)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		got = append(got, fmt.Sprintf("%s %s %s %d", c.Name, c.Type, c.JSONPath, c.Priority))
	}
	want := []string{
		"Ready string .status.conditions[?(@.type==\"Ready\")].status 0",
		"Targets string .status.targetsSummary 0",
		"Revision string .status.shortRevision 0",
		"Age date .metadata.creationTimestamp 0",
		"Suspended boolean .spec.suspend 1",
		"Last sync date .status.lastSuccessfulSyncTime 1",
		"Replica string .metadata.labels.shard\\.manifestsync\\.dev/owner 1",
		"Message string .status.conditions[?(@.type==\"Ready\")].message 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("printer columns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
