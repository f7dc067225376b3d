package engine

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/manifestsync/manifestsync/stdlib"
)

// Document is one YAML or JSON document of a file.
type Document = stdlib.YAMLDocument

// DecodeDocuments decodes every document of a YAML (or JSON) stream into
// JSON-shaped values, with stdlib.DecodeYAMLStream: the decoder of the yaml
// module, so a file reads the same in ctx.inputs and through
// yaml.decode_all. Empty documents are skipped; scalars keep Kubernetes'
// meaning (YAML 1.1 booleans, integers as int64).
func DecodeDocuments(data []byte) ([]Document, error) {
	return stdlib.DecodeYAMLStream(data)
}

// FileError names the file and line of an error of DecodeDocuments:
// "app/cm.yaml:6: did not find expected ',' or ']'".
func FileError(file string, err error) error {
	if ye, ok := errors.AsType[*stdlib.YAMLError](err); ok {
		return fmt.Errorf("%s:%d: %s", file, ye.Line, ye.Msg)
	}
	return fmt.Errorf("%s: %w", file, err)
}

// Input is one Kubernetes object read from a source file.
type Input struct {
	Source string
	Path   string
	Line   int
	Object map[string]any
}

// objectsOf returns the Kubernetes objects (documents with apiVersion and
// kind) of the YAML and JSON files in paths. Kustomization files are never
// objects; a List's items are.
func objectsOf(source string, snap *Snapshot, paths []string) ([]Input, error) {
	var out []Input
	for _, p := range paths {
		if !isManifestFile(p) {
			continue
		}
		docs, err := DecodeDocuments(snap.Files[p])
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", source, FileError(snap.FileName(source, p), err))
		}
		for _, d := range docs {
			m, ok := d.Value.(map[string]any)
			if !ok || !isObject(m) {
				continue
			}
			if items, ok := m["items"].([]any); ok && strings.HasSuffix(m["kind"].(string), "List") {
				for i, it := range items {
					im, ok := it.(map[string]any)
					if !ok || !isObject(im) {
						return nil, fmt.Errorf("source %q: %s:%d: items[%d] is not an object with apiVersion and kind", source, snap.FileName(source, p), d.Line, i)
					}
					out = append(out, Input{Source: source, Path: p, Line: d.Line, Object: im})
				}
				continue
			}
			out = append(out, Input{Source: source, Path: p, Line: d.Line, Object: m})
		}
	}
	return out, nil
}

func isObject(m map[string]any) bool {
	av, _ := m["apiVersion"].(string)
	k, _ := m["kind"].(string)
	return av != "" && k != "" && k != "Kustomization" && k != "Component"
}

// isManifestFile reports whether a path may hold Kubernetes objects:
// YAML and JSON files, except kustomization files.
func isManifestFile(p string) bool {
	base := path.Base(p)
	switch base {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return false
	}
	switch path.Ext(base) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(base, ".")
	}
	return false
}
