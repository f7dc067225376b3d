package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// A manifest that is still SOPS-encrypted (no spec.decryption, or a file
// of the repository the keys did not open, built by kustomize) fails its
// target naming the object, and is never output with ciphertext values.
func TestEncryptedManifestFails(t *testing.T) {
	enc := `apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: ENC[AES256_GCM,data:vg==,iv:4OU3fDkQS8fvxOYYLaK3Jud7bWbpLNaFJ7Sflo0YbIo=,tag:DHF388pLtDgRAa4hkSkjlg==,type:str]
sops:
  age:
  - recipient: age1jfw0fq5peek4qwh00xm2ml68yq06gza0zq69vx3vd3chzp3ha5xsaqmr5x
    enc: "-----BEGIN AGE ENCRYPTED FILE-----"
  lastmodified: "2026-11-27T14:09:21Z"
  mac: ENC[AES256_GCM,data:CIgA,iv:6ezhG/95K1VEoIIA5h+rBSvGU2+Jb7Nrckz5XzPRw3w=,tag:Swl61XcRsYXjDyHlLNJkkg==,type:str]
  version: 3.13.3
`
	for _, c := range []struct {
		what  string
		files map[string][]byte
		root  map[string][]byte
		path  string
	}{
		{"in the source's path", map[string][]byte{"secret.yaml": []byte(enc)}, nil, ""},
		{"built from ../../base", map[string][]byte{"kustomization.yaml": []byte("resources: [../../base]\n")}, map[string][]byte{
			"overlays/prod/kustomization.yaml": []byte("resources: [../../base]\n"),
			"base/kustomization.yaml":          []byte("resources: [secret.yaml]\n"),
			"base/secret.yaml":                 []byte(enc),
		}, "overlays/prod"},
	} {
		t.Run(c.what, func(t *testing.T) {
			spec := &v1alpha1.ManifestSyncSpec{
				Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://git.example.com/r.git", Path: c.path}}},
				Targets: []v1alpha1.Target{{Name: "prod", Namespace: "prod"}},
			}
			res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: spec, Snapshots: map[string]*engine.Snapshot{
				"repo": {Revision: "main@sha1:1", Files: c.files, Root: c.root}}}, engine.Options{})
			if err == nil {
				err = res.Err()
			}
			if err == nil || !strings.Contains(err.Error(), "Secret prod/db: still SOPS-encrypted") || !strings.Contains(err.Error(), "spec.decryption") {
				t.Fatalf("err = %v, want the object named as still encrypted", err)
			}
			if strings.Contains(err.Error(), "ENC[") {
				t.Errorf("the error quotes ciphertext: %v", err)
			}
		})
	}
}
