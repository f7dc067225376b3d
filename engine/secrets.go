package engine

import (
	"bytes"
	"encoding/base64"
	"strings"

	"github.com/manifestsync/manifestsync/engine/redact"
)

// SnapshotRedactor knows the Secret values of the snapshots: Secrets read
// by object and object set sources, the values of the Secrets a source's
// refs read (decoded, and as written), the values decrypted from SOPS
// files (as they are, and base64), and Secrets in the sources' manifest
// files, including those of sources that contribute only through a
// kustomize build (scripts can still read their files).
func SnapshotRedactor(snaps map[string]*Snapshot) *redact.Redactor {
	red := redact.New()
	for _, s := range snaps {
		if s == nil {
			continue
		}
		if s.Object != nil {
			red.AddObject(s.Object)
		}
		for _, o := range s.Objects {
			red.AddObject(o)
		}
		for _, v := range s.Decrypted {
			red.Add(v, base64.StdEncoding.EncodeToString([]byte(v)))
		}
		for key, data := range s.Refs {
			if strings.HasPrefix(key, "Secret/") {
				for _, v := range data {
					red.Add(v, base64.StdEncoding.EncodeToString([]byte(v)))
				}
			}
		}
		for p, data := range s.Files {
			if !isManifestFile(p) || !bytes.Contains(data, []byte("Secret")) {
				continue
			}
			docs, err := DecodeDocuments(data)
			if err != nil {
				continue // the evaluation reports it where it reads the file
			}
			for _, d := range docs {
				addSecrets(red, d.Value)
			}
		}
	}
	return red
}

// addSecrets adds v when it is a Secret, and the Secrets of v's items when
// it is a List.
func addSecrets(red *redact.Redactor, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	red.AddObject(m)
	if items, ok := m["items"].([]any); ok {
		for _, it := range items {
			addSecrets(red, it)
		}
	}
}

// encryptedObject reports whether obj is a manifest SOPS encrypted that
// reached the output as it is: the sops metadata (with its MAC) that sops
// writes at the top of the file. Applied, its values would be ciphertext
// (and the metadata an unknown field): without spec.decryption, or a file
// the keys did not open (one kustomize read from outside the source's
// path), the target fails instead, as Flux's kustomize-controller does.
func encryptedObject(obj map[string]any) bool {
	md, ok := obj["sops"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = md["mac"]
	return ok
}
