package importer

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzImport: whatever the YAML, Decode and Import return an error or a
// result, never panic.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"flux.yaml", "argo.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: argoproj.io/v1alpha1\nkind: ApplicationSet\nmetadata: {name: a}\nspec: {generators: [{list: {elements: [1]}}], template: 3}\n"))
	f.Add([]byte("apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a}\nspec: {chart: {spec: {sourceRef: 7}}, values: [1]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("fuzz.yaml", data)
		if err != nil {
			return
		}
		_, _ = Import(objs, Options{Repos: checkout()})
	})
}
