package config_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/lang/kustomize"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m, &env))
}

// TestDefaultAppliesToAPIServer builds the default kustomize layout and
// applies every object to a real API server with server-side dry-run: the
// manifests are well-formed, of kinds the server knows, and valid by its
// own validation (RBAC rules, Deployment fields, the CRD itself).
func TestDefaultAppliesToAPIServer(t *testing.T) {
	env.Need(t)
	objs := build(t, "default")
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("the default layout has no %s (has %v)", want, kinds)
		}
	}
	ctx := context.Background()
	for _, o := range objs {
		// A dry-run does not create the namespace the others live in:
		// create it for real.
		opts := []client.ApplyOption{client.ForceOwnership, client.FieldOwner("config-test")}
		if o.GetKind() != "Namespace" {
			opts = append(opts, client.DryRunAll)
		}
		if err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), opts...); err != nil {
			t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// TestManagerRunsTheOperator checks the Deployment runs `engine operator`
// with leader election, under the service account the RBAC binds.
func TestManagerRunsTheOperator(t *testing.T) {
	var deploy, binding *unstructured.Unstructured
	for _, o := range build(t, "default") {
		switch {
		case o.GetKind() == "Deployment":
			deploy = o
		case o.GetKind() == "ClusterRoleBinding" && o.GetName() == "manifestsync":
			binding = o
		}
	}
	if deploy == nil || binding == nil {
		t.Fatal("no manager Deployment or ClusterRoleBinding")
	}
	args := containerArgs(t, deploy)
	if len(args) == 0 || args[0] != "operator" || !slices.Contains(args, "--leader-elect") {
		t.Errorf("manager args %v, want operator --leader-elect ...", args)
	}
	sa, _, _ := unstructured.NestedString(deploy.Object, "spec", "template", "spec", "serviceAccountName")
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	subject := subjects[0].(map[string]any)
	if subject["name"] != sa || subject["namespace"] != deploy.GetNamespace() {
		t.Errorf("the binding's subject %v is not the manager's service account %s/%s", subject, deploy.GetNamespace(), sa)
	}
}

// build runs kustomize build over a directory of this package.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".yaml" {
			return err
		}
		files[filepath.ToSlash(p)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := kustomize.Build(files, dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// decode reads a stream of YAML documents, skipping empty ones.
func decode(t *testing.T, out []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if o.Object != nil {
			objs = append(objs, o)
		}
	}
	return objs
}
