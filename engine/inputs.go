package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Document is one YAML or JSON document of a file.
type Document struct {
	Line  int // line of the document's first node
	Value any // JSON-shaped: map[string]any, []any, string, bool, int64, float64, nil
}

// DecodeDocuments decodes every document of a YAML (or JSON) stream into
// JSON-shaped values. Empty documents are skipped. Scalars keep Kubernetes'
// meaning: integers are int64, timestamps stay strings as written.
func DecodeDocuments(data []byte) ([]Document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []Document
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(n.Content) == 0 {
			continue
		}
		budget := aliasBudget(len(data))
		v, err := nodeValue(n.Content[0], 0, &budget)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		docs = append(docs, Document{Line: n.Content[0].Line, Value: v})
	}
}

const maxYAMLDepth = 1000

// aliasBudget bounds how many nodes a document may expand to, so that a
// document of nested aliases (a "billion laughs") fails fast instead of
// exhausting memory.
func aliasBudget(size int) int { return 100*size + 10_000 }

func nodeValue(n *yaml.Node, depth int, budget *int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("line %d: nested deeper than %d levels", n.Line, maxYAMLDepth)
	}
	if *budget--; *budget < 0 {
		return nil, fmt.Errorf("line %d: aliases expand to too many nodes", n.Line)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nodeValue(n.Alias, depth+1, budget)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				merges = append(merges, v)
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a mapping key must be a scalar", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: duplicate key %q", k.Line, k.Value)
			}
			val, err := nodeValue(v, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		for _, m := range merges {
			mv, err := nodeValue(m, depth+1, budget)
			if err != nil {
				return nil, err
			}
			var maps []any
			switch mv := mv.(type) {
			case map[string]any:
				maps = []any{mv}
			case []any:
				maps = mv
			}
			for _, mm := range maps {
				mm, ok := mm.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("line %d: a merge key needs a mapping", m.Line)
				}
				for k, v := range mm {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
			}
		}
		return out, nil
	case yaml.ScalarNode:
		return scalarValue(n)
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

// yaml11Bools are the plain scalars YAML 1.1 reads as booleans. Kubernetes
// reads manifests as YAML 1.1 (sigs.k8s.io/yaml), so `enabled: yes` is true
// there, and must be here too.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

func scalarValue(n *yaml.Node) (any, error) {
	if n.Style == 0 && n.Tag == "!!str" {
		if b, ok := yaml11Bools[n.Value]; ok {
			return b, nil
		}
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			return nil, fmt.Errorf("line %d: %q is not a bool", n.Line, n.Value)
		}
		return b, nil
	case "!!int":
		v := strings.ReplaceAll(n.Value, "_", "")
		if i, err := strconv.ParseInt(v, 0, 64); err == nil {
			return i, nil
		}
		if strings.HasPrefix(v, "0o") || strings.HasPrefix(v, "0O") {
			if i, err := strconv.ParseInt(v[2:], 8, 64); err == nil {
				return i, nil
			}
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: %q is not a number", n.Line, n.Value)
		}
		return f, nil
	case "!!float":
		switch strings.ToLower(n.Value) {
		case ".inf", "+.inf", "-.inf", ".nan":
			return nil, fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, fmt.Errorf("line %d: %q is not a number", n.Line, n.Value)
		}
		return f, nil
	}
	return n.Value, nil
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
			return nil, fmt.Errorf("source %q: %s: %w", source, snap.FileName(source, p), err)
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
