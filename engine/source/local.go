package source

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/manifestsync/manifestsync/engine"
)

// Limits bound what a source may hold, so that a mistaken path (a home
// directory, a huge repository) fails fast instead of exhausting memory.
type Limits struct {
	MaxFiles int   // default 10,000
	MaxBytes int64 // default 256 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = 10_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 256 << 20
	}
	return l
}

// Dir reads a local directory into a snapshot whose revision is a digest
// of its content. Hidden files and directories (".git") are skipped, and so
// are symbolic links, which could point outside the directory.
func Dir(root string, limits Limits) (*engine.Snapshot, error) {
	limits = limits.withDefaults()
	snap := &engine.Snapshot{Files: map[string][]byte{}}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		if len(snap.Files) >= limits.MaxFiles {
			return fmt.Errorf("more than %d files", limits.MaxFiles)
		}
		if total > limits.MaxBytes {
			return fmt.Errorf("more than %d bytes", limits.MaxBytes)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		snap.Files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", root, err)
	}
	snap.Revision = engine.ContentDigest(snap.Files)
	snap.Origin = root
	return snap, nil
}

// ObjectFile reads one Kubernetes object from a YAML or JSON file, as the
// CLI's stand-in for an object in a cluster. The snapshot's revision is the
// object's resourceVersion when it has one, else a digest of its content.
func ObjectFile(name string) (*engine.Snapshot, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	docs, err := engine.DecodeDocuments(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var objs []map[string]any
	for _, d := range docs {
		if m, ok := d.Value.(map[string]any); ok && m["apiVersion"] != nil && m["kind"] != nil {
			objs = append(objs, m)
		}
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: holds %d objects, want exactly one", name, len(objs))
	}
	return ObjectSnapshot(objs[0]), nil
}

// ObjectSnapshot makes the snapshot of an object source.
func ObjectSnapshot(obj map[string]any) *engine.Snapshot {
	snap := &engine.Snapshot{Object: obj}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"].(string); ok && rv != "" {
			snap.Revision = "resourceVersion:" + rv
		}
	}
	if snap.Revision == "" {
		snap.Revision = engine.ObjectDigest(obj)
	}
	return snap
}

// ObjectGetter reads one object of a cluster; the operator implements it.
type ObjectGetter interface {
	GetObject(ctx context.Context, apiVersion, kind, namespace, name string) (map[string]any, error)
}

// Object fetches an object source through a getter.
func Object(ctx context.Context, g ObjectGetter, apiVersion, kind, namespace, name string) (*engine.Snapshot, error) {
	obj, err := g.GetObject(ctx, apiVersion, kind, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, err)
	}
	return ObjectSnapshot(obj), nil
}
