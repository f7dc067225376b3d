package source

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/manifestsync/manifestsync/engine"
)

// ObjectSetFileIn reads the objects of an object set source from name, a
// file or a directory inside the tree dir, as the CLI's stand-in for a
// cluster; see ObjectSetFrom.
func ObjectSetFileIn(dir, name string, set *engine.ObjectSet) (*engine.Snapshot, error) {
	info, err := Stat(dir, name)
	if err != nil {
		return nil, err
	}
	if info.IsDir() {
		tree, err := Dir(filepath.Join(dir, name), Limits{})
		if err != nil {
			return nil, err
		}
		return ObjectSetFrom(tree, set)
	}
	b, err := ReadFile(dir, name)
	if err != nil {
		return nil, err
	}
	return ObjectSetFrom(&engine.Snapshot{Files: map[string][]byte{name: b}, Origin: dir}, set)
}

// ObjectSetFrom is the snapshot of an object set source read from the
// files of files (a directory, or a one-file tree): every object of their
// YAML or JSON documents (and of their Lists) that set selects, by the
// rules the operator applies to a cluster. Namespace objects among them
// give their labels to set's namespaceSelector.
func ObjectSetFrom(files *engine.Snapshot, set *engine.ObjectSet) (*engine.Snapshot, error) {
	var objs []map[string]any
	for _, p := range files.Paths() {
		if ext := path.Ext(p); ext != ".yaml" && ext != ".yml" && ext != ".json" {
			continue
		}
		got, err := decodeObjects(files.Files[p])
		if err != nil {
			name := p
			if files.Origin != "" {
				name = files.FileName("", p)
			}
			return nil, fmt.Errorf("%s: %w", name, err)
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
