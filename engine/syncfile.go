package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// SyncFile is one ManifestSync read from a YAML file, with the positions of
// its fields so that every finding can name file:line.
type SyncFile struct {
	// Name is the file's name as given.
	Name string
	// Sync is the decoded resource.
	Sync *v1alpha1.ManifestSync
	root *yaml.Node
}

// FieldError is a problem with one field of a file.
type FieldError struct {
	File  string
	Line  int
	Field string // e.g. "spec.targets[1].patches[0].patch"
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// FieldErrors is a list of problems, all of which are reported.
type FieldErrors []*FieldError

func (errs FieldErrors) Error() string {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// LoadSyncFiles decodes every ManifestSync document in data; documents of
// other kinds are skipped. Unknown fields, wrong types and specs that break
// the rules of the CRD are errors naming the file, line and field.
func LoadSyncFiles(name string, data []byte) ([]*SyncFile, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var files []*SyncFile
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		root := doc.Content[0]
		if k := MapValue(root, "kind"); k == nil || k.Value != v1alpha1.Kind {
			continue
		}
		f, err := decodeSync(name, root)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// LoadSyncFile is LoadSyncFiles for a file that must hold exactly one
// ManifestSync.
func LoadSyncFile(name string, data []byte) (*SyncFile, error) {
	files, err := LoadSyncFiles(name, data)
	if err != nil {
		return nil, err
	}
	switch len(files) {
	case 0:
		return nil, fmt.Errorf("%s: no ManifestSync (apiVersion %s, kind %s) in the file", name, v1alpha1.GroupVersion, v1alpha1.Kind)
	case 1:
		return files[0], nil
	}
	return nil, fmt.Errorf("%s: %d ManifestSyncs in the file, want one", name, len(files))
}

func decodeSync(name string, root *yaml.Node) (*SyncFile, error) {
	f := &SyncFile{Name: name, root: root}
	var errs FieldErrors
	if v := MapValue(root, "apiVersion"); v == nil || v.Value != v1alpha1.GroupVersion.String() {
		errs = append(errs, f.errorf("apiVersion", "must be %s", v1alpha1.GroupVersion))
	}
	checkFields(root, reflect.TypeOf(v1alpha1.ManifestSync{}), "", func(field string, n *yaml.Node, msg string) {
		errs = append(errs, &FieldError{File: name, Line: n.Line, Field: field, Msg: msg})
	})
	if len(errs) > 0 {
		return nil, errs
	}
	var generic any
	if err := root.Decode(&generic); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	raw, err := json.Marshal(JSONValue(generic))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var ms v1alpha1.ManifestSync
	if err := json.Unmarshal(raw, &ms); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, f.errorf(te.Field, "got %s, want %s", te.Value, te.Type)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f.Sync = &ms
	if errs := Validate(&ms.Spec); len(errs) > 0 {
		for _, e := range errs {
			e.File = name
			e.Line = f.Line(e.Field)
		}
		return nil, errs
	}
	return f, nil
}

func (f *SyncFile) errorf(field, format string, args ...any) *FieldError {
	return &FieldError{File: f.Name, Line: f.Line(field), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Line returns the line of a field path such as "spec.targets[1].params",
// or of its nearest ancestor that exists in the file (see FieldLine).
func (f *SyncFile) Line(field string) int { return FieldLine(f.root, field) }

var jsonUnmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// checkFields reports every mapping key under n that t (a Go type decoded
// with encoding/json) has no field for, and duplicate keys. Types that
// decode themselves (free-form params, durations, quantities) are not
// looked into.
func checkFields(n *yaml.Node, t reflect.Type, field string, report func(field string, n *yaml.Node, msg string)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode || n.Tag == "!!null" {
		return
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			report(field, n, fmt.Sprintf("got %s, want an object", nodeKind(n)))
			return
		}
		fields := jsonFields(t)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := joinField(field, k.Value)
			if seen[k.Value] {
				report(sub, k, "duplicate field")
				continue
			}
			seen[k.Value] = true
			ft, ok := fields[k.Value]
			if !ok {
				report(sub, k, "unknown field"+didYouMean(nearestField(fields, k.Value)))
				continue
			}
			checkFields(v, ft, sub, report)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return
		}
		if n.Kind != yaml.SequenceNode {
			report(field, n, fmt.Sprintf("got %s, want a list", nodeKind(n)))
			return
		}
		for i, e := range n.Content {
			checkFields(e, t.Elem(), fmt.Sprintf("%s[%d]", field, i), report)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			report(field, n, fmt.Sprintf("got %s, want an object", nodeKind(n)))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkFields(n.Content[i+1], t.Elem(), joinField(field, n.Content[i].Value), report)
		}
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int32, reflect.Int64, reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			report(field, n, fmt.Sprintf("got %s, want a %s", nodeKind(n), t.Kind()))
		}
	}
}

// nearestField is the field of fields that name is likely a typo of
// ("targets" for "target"), or "".
func nearestField(fields map[string]reflect.Type, name string) string {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	return lstar.Nearest(name, names)
}

// didYouMean is ` (did you mean "NEAR"?)`, or "" when near is.
func didYouMean(near string) string {
	if near == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", near)
}

// SuggestField returns the field of a ManifestSync that the unknown field
// at path ("spec.targets[0].replica", as the CRD's validation names it)
// is likely a typo of ("replicas"), or "" when none is close or the path
// leads into a free-form value (params, a map).
func SuggestField(path string) string {
	t := reflect.TypeOf(v1alpha1.ManifestSync{})
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		name, _, _ := strings.Cut(seg, "[")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
			return ""
		}
		fields := jsonFields(t)
		if i == len(segs)-1 {
			return nearestField(fields, name)
		}
		ft, ok := fields[name]
		if !ok {
			return ""
		}
		for range strings.Count(seg, "[") { // a list's element
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() != reflect.Slice {
				return ""
			}
			ft = ft.Elem()
		}
		t = ft
	}
	return ""
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a scalar"
}

// jsonFields maps the JSON names of t's fields, with inline embedded
// structs flattened, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if sf.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			for k, v := range jsonFields(ft) {
				out[k] = v
			}
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = sf.Type
	}
	return out
}

// JSONValue turns the map[string]any/[]any that yaml.v3 decodes into values
// encoding/json accepts (yaml.v3 may produce map[any]any for odd keys). It
// changes v in place and returns it.
func JSONValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = JSONValue(e)
		}
		return v
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = JSONValue(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = JSONValue(e)
		}
		return v
	}
	return v
}
