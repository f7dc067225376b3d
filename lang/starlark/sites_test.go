package starlark

import (
	"context"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

func TestSites(t *testing.T) {
	files := memFiles{
		"app/main.star": `load("lib.star", "service")
def deployment(name):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
    }
def main(ctx):
    return [deployment("web"), service("web"),
            k8s.object("v1", "ServiceAccount", "web"),
            k8s.config_map("web"),
            make(kind = "Role"), make(kind = "Role")]
def make(kind):
    return {"kind": kind}
`,
		"app/lib.star": `def service(name):
    return dict(apiVersion = "v1", kind = "Service", metadata = {"name": name})
`,
	}
	k8s := &starlarkstruct.Module{Name: "k8s", Members: starlark.StringDict{
		"object":     starlark.NewBuiltin("k8s.object", nil),
		"config_map": starlark.NewBuiltin("k8s.config_map", nil),
	}}
	in := New(Options{Predeclared: starlark.StringDict{"k8s": k8s}})
	m, err := in.Load(context.Background(), files, Script{Source: "app", Path: "main.star"})
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]string{
		"Deployment":     "app/main.star:3:12",
		"Service":        "app/lib.star:2:12",
		"ServiceAccount": "app/main.star:10:13",
		"ConfigMap":      "app/main.star:11:13",
	} {
		pos, ok := m.Site(kind)
		if !ok || pos.String() != want {
			t.Errorf("Site(%s) = %v, %v; want %s", kind, pos, ok, want)
		}
	}
	// Built in two places (the same call twice), or in none: unknown.
	for _, kind := range []string{"Role", "Secret"} {
		if pos, ok := m.Site(kind); ok {
			t.Errorf("Site(%s) = %v, want none", kind, pos)
		}
	}
}
