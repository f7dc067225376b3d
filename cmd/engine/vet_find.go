package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
)

// candidate is a YAML file that may hold ManifestSyncs.
type candidate struct {
	path string
	// named is set for files given on the command line, which must hold
	// a ManifestSync; files found by walking a directory are skipped
	// when they hold none.
	named bool
}

// findCandidates lists the files to read: every *.yaml and *.yml file under
// each directory, in lexical order, and each file given by name. Nothing is
// skipped: vet checks everything it is pointed at.
func findCandidates(paths []string) ([]candidate, []error) {
	var (
		out  []candidate
		errs []error
		seen = map[string]bool{}
	)
	add := func(p string, named bool) {
		if !seen[p] {
			seen[p] = true
			out = append(out, candidate{path: p, named: named})
		}
	}
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !info.IsDir() {
			add(filepath.Clean(root), true)
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml") {
				return nil
			}
			switch {
			case d.Type().IsRegular():
				add(p, false)
			case !d.IsDir() && d.Type()&fs.ModeSymlink == 0:
				// A FIFO, socket or device: refused, not opened.
				errs = append(errs, &source.NotRegularError{Path: p, Mode: d.Type()})
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errs
}

// syncDoc is one ManifestSync document of a file.
type syncDoc struct {
	file string
	root *yaml.Node // the document's top-level mapping, for line numbers
	obj  map[string]any
	data []byte // the whole file, for the lines errors name
}

// line returns the line of a field path of the document; see engine.FieldLine.
func (d *syncDoc) line(field string) int { return engine.FieldLine(d.root, field) }

// kindLine matches a block-style "kind: ManifestSync" line, to tell a
// malformed ManifestSync from some other malformed YAML file.
var kindLine = regexp.MustCompile(`(?m)^\s*kind:\s*["']?` + v1alpha1.Kind + `["']?\s*(#.*)?$`)

// readSyncDocs returns the ManifestSync documents of a file: mappings whose
// kind is ManifestSync. A file that is not YAML is an error if it was
// named, or looks like a ManifestSync; otherwise it is none of vet's
// business.
func readSyncDocs(c candidate) ([]*syncDoc, error) {
	data, err := source.ReadRegularFile(c.path)
	if err != nil {
		return nil, err
	}
	if !c.named && !bytes.Contains(data, []byte(v1alpha1.Kind)) {
		return nil, nil
	}
	var docs []*syncDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if c.named || kindLine.Match(data) {
				return nil, fmt.Errorf("%s: %w", c.path, err)
			}
			return nil, nil
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		root := doc.Content[0]
		if k := engine.MapValue(root, "kind"); k == nil || k.Kind != yaml.ScalarNode || k.Value != v1alpha1.Kind {
			continue
		}
		var v any
		if err := root.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", c.path, root.Line, err)
		}
		obj, ok := engine.JSONValue(v).(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s:%d: not an object", c.path, root.Line)
		}
		docs = append(docs, &syncDoc{file: c.path, root: root, obj: obj, data: data})
	}
	if c.named && len(docs) == 0 {
		return nil, fmt.Errorf("%s: %w", c.path, errNoSync)
	}
	return docs, nil
}
