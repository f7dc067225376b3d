package schemas_test

import (
	"encoding/json"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/lang/cue"
	"github.com/manifestsync/manifestsync/schemas"
)

func TestNames(t *testing.T) {
	if got, want := schemas.Names(), []string{"k8s", "manifestsync"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, name := range schemas.Names() {
		s, err := cue.Builtin(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Name() != "builtin:"+name {
			t.Errorf("name %q", s.Name())
		}
	}
}

// TestK8sGenerated checks the shape of the generated tree: one package,
// the index, a definition per kind.
func TestK8sGenerated(t *testing.T) {
	index, err := fs.ReadFile(schemas.FS, "k8s/k8s.cue")
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range []string{"#Object:", "#Deployment: #apps_v1_Deployment", "#Service: #core_v1_Service", "#CronJob:", "#Ingress:", "#ClusterRole:", "#PodDisruptionBudget:", "#HorizontalPodAutoscaler:"} {
		if !strings.Contains(string(index), "\n"+def) {
			t.Errorf("k8s.cue does not define %s", def)
		}
	}
	entries, err := fs.ReadDir(schemas.FS, "k8s")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".cue") {
			t.Errorf("k8s/%s: want only the CUE files of one package", e.Name())
		}
	}
}

// TestManifestSyncCoversTheGoType fills every field of the Go type and
// checks that #ManifestSync accepts the result: the schema knows every
// field the API has.
func TestManifestSyncCoversTheGoType(t *testing.T) {
	prune := true
	ms := v1alpha1.ManifestSync{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "platform", Labels: map[string]string{"a": "b"}},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{
				{Name: "repo", Git: &v1alpha1.GitSource{
					URL: "https://git.example.com/org/config.git", Path: "apps/web",
					Ref:       v1alpha1.GitRef{Branch: "main", Tag: "v1", SemVer: ">=1.2 <2", Commit: "4f2c0ab"},
					SecretRef: &v1alpha1.LocalObjectReference{Name: "git-auth"},
				}},
				{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Namespace: "platform", Name: "wildcard-tls"}},
				{Name: "base", Kustomize: &v1alpha1.KustomizeSource{Source: "repo", Path: "overlays/prod"}},
				{Name: "shop", Objects: &v1alpha1.ObjectSetSource{Namespace: "shop"},
					Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "primary", Key: "value"}}},
			},
			Transform: &v1alpha1.Transform{CUE: &v1alpha1.CUEProgramRef{
				ProgramRef: v1alpha1.ProgramRef{Source: "repo", Path: "gen/"}, Expression: "objects",
			}},
			Schemas: []v1alpha1.SchemaRef{{Source: "repo", Path: "schemas/"}, {Builtin: "k8s"}},
			Params:  &runtime.RawExtension{Raw: []byte(`{"replicas": 2}`)},
			Targets: []v1alpha1.Target{
				{
					Name: "dev", Namespace: "web-dev", Labels: map[string]string{"env": "dev"},
					Params:  &runtime.RawExtension{Raw: []byte(`{"replicas": 1}`)},
					Patches: []v1alpha1.Patch{{Patch: "- {op: add, path: /x, value: 1}", Target: &v1alpha1.PatchSelector{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web", Namespace: "web-.*", LabelSelector: "a=b", AnnotationSelector: "c=d"}}},
				},
				{
					Name: "prod-eu", Namespace: "web",
					Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "prod-eu", Key: "value"}},
				},
				{Name: "teams", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}},
				{Name: "dr-teams", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}},
					Cluster: &v1alpha1.ClusterRef{KubeConfigSecretRef: v1alpha1.SecretKeyReference{Name: "dr", Key: "value"}}},
			},
			Policy:             v1alpha1.Policy{Resources: v1alpha1.PolicyAdopt, Prune: &prune, Deletion: v1alpha1.DeletionOrphan, Drift: v1alpha1.DriftReport},
			Interval:           &metav1.Duration{Duration: 90_000_000_000},
			Suspend:            true,
			ServiceAccountName: "web-sync",
		},
	}
	data, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj, "status")
	delete(obj["metadata"].(map[string]any), "creationTimestamp")
	s, err := cue.Builtin("manifestsync")
	if err != nil {
		t.Fatal(err)
	}
	_, vs, err := s.Validate(obj)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("%s (%v)", v, v.Pos)
	}
}

// A source's cluster goes only with object or objects, as the CRD says.
func TestManifestSyncSourceCluster(t *testing.T) {
	s, err := cue.Builtin("manifestsync")
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{
		"apiVersion": "manifestsync.dev/v1alpha1", "kind": "ManifestSync",
		"metadata": map[string]any{"name": "web", "namespace": "platform"},
		"spec": map[string]any{
			"sources": []any{map[string]any{
				"name": "repo", "git": map[string]any{"url": "https://git.example.com/config.git"},
				"cluster": map[string]any{"kubeConfigSecretRef": map[string]any{"name": "primary"}},
			}},
			"targets": []any{map[string]any{"name": "dev", "namespace": "dev"}},
		},
	}
	_, vs, err := s.Validate(obj)
	if err != nil {
		t.Fatal(err)
	}
	// CUE's matchN of "exactly one of" fails too over a field in error.
	var msgs []string
	found := false
	for _, v := range vs {
		msgs = append(msgs, v.String())
		found = found || strings.HasPrefix(v.String(), "spec.sources[0].cluster: cluster is set only with object or objects")
	}
	if !found {
		t.Errorf("violations = %q, want spec.sources[0].cluster: cluster is set only with object or objects", msgs)
	}
}

// The oci, http and decryption fields hold to the CRD's patterns and
// rules: an http source needs a digest unless it is insecure.
func TestManifestSyncPackagedSources(t *testing.T) {
	s, err := cue.Builtin("manifestsync")
	if err != nil {
		t.Fatal(err)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tt := range []struct {
		name    string
		sources []any
		want    string // a violation's prefix, "" for none
	}{
		{"valid", []any{
			map[string]any{"name": "a", "oci": map[string]any{"url": "oci://127.0.0.1:5000/app", "ref": map[string]any{"semver": "1.x"},
				"verify": map[string]any{"provider": "cosign", "secretRef": map[string]any{"name": "k"}}}},
			map[string]any{"name": "b", "http": map[string]any{"url": "https://h/a.tgz", "digest": digest}},
			map[string]any{"name": "c", "http": map[string]any{"url": "http://h/a.tgz", "insecure": true}},
			map[string]any{"name": "d", "git": map[string]any{"url": "https://h/r.git", "verify": map[string]any{"secretRef": map[string]any{"name": "k"}}}},
		}, ""},
		// CUE reports the rule as the source's "exactly one of" (matchN
		// fails over a member in error); the CRD and engine vet name it.
		{"http without digest", []any{map[string]any{"name": "b", "http": map[string]any{"url": "https://h/a.tgz"}}}, "spec.sources[0]: "},
		{"http not insecure", []any{map[string]any{"name": "b", "http": map[string]any{"url": "https://h/a.tgz", "insecure": false}}}, "spec.sources[0]: "},
		{"oci url", []any{map[string]any{"name": "a", "oci": map[string]any{"url": "https://h/app"}}}, "spec.sources[0].oci.url"},
		{"oci and git", []any{map[string]any{"name": "a", "oci": map[string]any{"url": "oci://h/app"}, "git": map[string]any{"url": "https://h/r.git"}}}, "spec.sources[0]"},
		{"git verify mode", []any{map[string]any{"name": "d", "git": map[string]any{"url": "https://h/r.git", "verify": map[string]any{"mode": "Commit", "secretRef": map[string]any{"name": "k"}}}}}, "spec.sources[0].git.verify.mode"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj := map[string]any{
				"apiVersion": "manifestsync.dev/v1alpha1", "kind": "ManifestSync",
				"metadata": map[string]any{"name": "web", "namespace": "platform"},
				"spec": map[string]any{
					"sources":    tt.sources,
					"decryption": map[string]any{"provider": "sops", "secretRef": map[string]any{"name": "age"}},
					"targets":    []any{map[string]any{"name": "dev", "namespace": "dev"}},
				},
			}
			_, vs, err := s.Validate(obj)
			if err != nil {
				t.Fatal(err)
			}
			var msgs []string
			found := false
			for _, v := range vs {
				msgs = append(msgs, v.String())
				found = found || tt.want != "" && strings.HasPrefix(v.String(), tt.want)
			}
			if tt.want == "" && len(vs) > 0 || tt.want != "" && !found {
				t.Errorf("violations = %q, want %q", msgs, tt.want)
			}
		})
	}
}
