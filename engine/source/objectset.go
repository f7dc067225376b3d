package source

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/manifestsync/manifestsync/engine"
)

// ObjectSetFileIn reads the objects of an object set source from name, a
// file or a directory inside the tree dir, as the CLI's stand-in for a
// cluster: every object of its YAML or JSON documents (and of their
// Lists) that set selects, by the rules the operator applies to a
// cluster. Namespace objects in it give their labels to set's
// namespaceSelector.
func ObjectSetFileIn(dir, name string, set *engine.ObjectSet) (*engine.Snapshot, error) {
	info, err := Stat(dir, name)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	if info.IsDir() {
		tree, err := Dir(filepath.Join(dir, name), Limits{})
		if err != nil {
			return nil, err
		}
		for _, p := range tree.Paths() {
			if ext := filepath.Ext(p); ext == ".yaml" || ext == ".yml" || ext == ".json" {
				files[filepath.Join(dir, name, p)] = tree.Files[p]
			}
		}
	} else {
		b, err := ReadFile(dir, name)
		if err != nil {
			return nil, err
		}
		files[filepath.Join(dir, name)] = b
	}
	var objs []map[string]any
	for _, p := range (&engine.Snapshot{Files: files}).Paths() {
		got, err := decodeObjects(files[p])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		objs = append(objs, got...)
	}
	return ObjectSetOf(objs, set), nil
}

// ObjectSetOf is the snapshot of the objects of objs that set selects.
func ObjectSetOf(objs []map[string]any, set *engine.ObjectSet) *engine.Snapshot {
	namespaces := map[string]map[string]string{}
	for _, m := range objs {
		if m["apiVersion"] != "v1" || m["kind"] != "Namespace" {
			continue
		}
		md, _ := m["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		lbls := map[string]string{}
		if l, ok := md["labels"].(map[string]any); ok {
			for k, v := range l {
				if s, ok := v.(string); ok {
					lbls[k] = s
				}
			}
		}
		namespaces[name] = lbls
	}
	return engine.ObjectSetSnapshot(set.Filter(objs, namespaces))
}

// decodeObjects decodes the Kubernetes objects of a YAML or JSON stream,
// with the items of Lists.
func decodeObjects(data []byte) ([]map[string]any, error) {
	docs, err := engine.DecodeDocuments(data)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	var add func(v any)
	add = func(v any) {
		m, ok := v.(map[string]any)
		if !ok || m["apiVersion"] == nil {
			return
		}
		if _, ok := m["kind"].(string); !ok {
			return
		}
		if items, ok := m["items"].([]any); ok && strings.HasSuffix(m["kind"].(string), "List") {
			for _, it := range items {
				add(it)
			}
			return
		}
		out = append(out, m)
	}
	for _, d := range docs {
		add(d.Value)
	}
	return out, nil
}
