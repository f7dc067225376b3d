package worker

import (
	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// substituteSpec is a git source whose path holds a kustomization, built
// and substituted from a Secret ref: the refs cross to the worker, and
// the parent's redactor learns their values.
func substituteSpec() engine.Spec {
	files := map[string][]byte{
		"cm.yaml":            []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {pw: \"${password}\"}\n"),
		"kustomization.yaml": []byte("resources: [cm.yaml]\nnamePrefix: built-\n"),
	}
	return engine.Spec{
		Sync: &v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: "https://example.com/app.git",
				Build: v1alpha1.Build{SubstituteFrom: []v1alpha1.SubstituteReference{{Kind: "Secret", Name: "creds"}}}}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: "dev"}},
		},
		Snapshots: map[string]*engine.Snapshot{"app": {
			Revision: "refs:sha256:0@main@sha1:0123456",
			Files:    files,
			Refs:     map[string]map[string]string{"Secret/creds": {"password": "a-password-of-the-secret"}},
		}},
	}
}

// rootSpec is a git source whose path holds an overlay naming ../../base:
// the repository's tree (Snapshot.Root) crosses to the worker, which
// builds the overlay in it.
func rootSpec() engine.Spec {
	root := map[string][]byte{
		"base/cm.yaml":                           []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n"),
		"base/kustomization.yaml":                []byte("resources: [cm.yaml]\n"),
		"overlays/production/kustomization.yaml": []byte("resources: [../../base]\nnamePrefix: prod-\n"),
	}
	return engine.Spec{
		Sync: &v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", Git: &v1alpha1.GitSource{URL: "https://example.com/fleet.git", Path: "overlays/production"}}},
			Targets: []v1alpha1.Target{{Name: "dev", Namespace: "dev"}},
		},
		Snapshots: map[string]*engine.Snapshot{"app": {
			Revision: "main@sha1:0123456",
			Files:    map[string][]byte{"kustomization.yaml": root["overlays/production/kustomization.yaml"]},
			Root:     root,
		}},
	}
}
