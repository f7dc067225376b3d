package main

import (
	"errors"
	"slices"
	"testing"
)

// The default of --trusted-namespaces is the operator's own namespace
// ($POD_NAMESPACE, else its service account's); outside a pod, none: every
// ManifestSync without a service account goes through the write gate.
func TestOwnNamespace(t *testing.T) {
	noFile := func(string) ([]byte, error) { return nil, errors.New("no such file") }
	file := func(path string) ([]byte, error) {
		if path != serviceAccountNamespaceFile {
			t.Errorf("read %s, want %s", path, serviceAccountNamespaceFile)
		}
		return []byte("manifestsync-system\n"), nil
	}
	env := func(v string) func(string) string {
		return func(name string) string {
			if name == "POD_NAMESPACE" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name     string
		getenv   func(string) string
		readFile func(string) ([]byte, error)
		want     []string
	}{
		{"POD_NAMESPACE", env("ops"), file, []string{"ops"}},
		{"service account", env(""), file, []string{"manifestsync-system"}},
		{"outside a pod", env(""), noFile, nil},
	} {
		if got := ownNamespace(c.getenv, c.readFile); !slices.Equal(got, c.want) {
			t.Errorf("%s: ownNamespace = %q, want %q", c.name, got, c.want)
		}
	}
}
