package importer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifestsync/manifestsync/engine"
)

// MaxDocuments bounds the documents Decode reads from one file.
const MaxDocuments = 10000

// Decode reads every YAML document of data, a file called name. A
// document that is not YAML is an error naming name:line; empty documents
// and ones that are not mappings are skipped.
func Decode(name string, data []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Object
	for n := 0; ; n++ {
		if n >= MaxDocuments {
			return nil, fmt.Errorf("%s: more than %d documents", name, MaxDocuments)
		}
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, posError(name, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		root := doc.Content[0]
		var v any
		if err := root.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, root.Line, lineError(err))
		}
		m, _ := engine.JSONValue(v).(map[string]any)
		out = append(out, Object{File: name, Line: root.Line, Content: m, root: root})
	}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// posError names file name and the line of a YAML error: "name:3: ...".
func posError(name string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s:%s: %s", name, m[1], err.Error()[len(m[0]):])
	}
	return fmt.Errorf("%s: %w", name, lineError(err))
}

// lineError turns yaml's "yaml: line 3: ..." into "line 3: ...".
func lineError(err error) error {
	msg, ok := strings.CutPrefix(err.Error(), "yaml: ")
	if !ok {
		return err
	}
	return errors.New(msg)
}

// object is an input object being converted: it remembers which fields of
// its spec were read, so that every other field is reported (see
// leftovers).
type object struct {
	*Object
	group, version, kind, name, namespace string
	// read are the field paths read or reported.
	read     map[string]bool
	findings []Finding
	// label overrides how findings name the object (a generated
	// Application names its ApplicationSet), and shown is the path of its
	// fields there (spec.template.).
	label, shown string
}

func newObject(in *Object) *object {
	o := &object{Object: in, read: map[string]bool{}}
	api, _ := in.Content["apiVersion"].(string)
	if g, v, ok := strings.Cut(api, "/"); ok {
		o.group, o.version = g, v
	} else {
		o.version = api
	}
	o.kind, _ = in.Content["kind"].(string)
	meta, _ := in.Content["metadata"].(map[string]any)
	o.name, _ = meta["name"].(string)
	o.namespace, _ = meta["namespace"].(string)
	return o
}

// fresh is o with nothing read yet: a source used by several objects is
// reported with each.
func (o *object) fresh() *object {
	c := *o
	c.read, c.findings = map[string]bool{}, nil
	return &c
}

func (o *object) groupKind() string { return o.group + "/" + o.kind }

func (o *object) key() string { return o.groupKind() + "/" + o.namespace + "/" + o.name }

func (o *object) isSource() bool {
	return o.group == fluxSourceGroup
}

// String is "Kind namespace/name".
func (o *object) String() string {
	if o.label != "" {
		return o.label
	}
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// where is FILE:LINE of field, or of the object.
func (o *object) where(field string) string {
	if o.File == "" {
		return ""
	}
	line := o.Line
	if o.root != nil && field != "" {
		line = engine.FieldLine(o.root, o.shown+field)
	}
	if line <= 0 {
		return o.File
	}
	return o.File + ":" + strconv.Itoa(line)
}

// skipped is the finding of an object that gives no ManifestSync.
func (o *object) skipped(why string) Finding {
	return Finding{Object: o.String(), Where: o.where(""), Why: why}
}

// errorf is an error about field of o, naming where it is.
func (o *object) errorf(field, format string, args ...any) error {
	var b strings.Builder
	if w := o.where(field); w != "" {
		b.WriteString(w + ": ")
	}
	b.WriteString(o.String())
	if field != "" {
		b.WriteString(" " + field)
	}
	return fmt.Errorf("%s: %s", b.String(), fmt.Sprintf(format, args...))
}

// report records that field (which the object has) was not carried over,
// or was with a different meaning, and why; it counts as read.
func (o *object) report(field, why string) {
	o.read[field] = true
	o.findings = append(o.findings, Finding{Object: o.String(), Where: o.where(field), Field: o.shown + field, Why: why})
}

// drop reports field when the object sets it.
func (o *object) drop(field, why string) {
	if o.read[field] {
		return
	}
	if _, ok := o.get(field); ok {
		o.report(field, why)
	}
}

// get returns the value at a field path such as spec.ref.branch or
// spec.sources[1].path, and marks it read.
func (o *object) get(field string) (any, bool) {
	o.read[field] = true
	return lookup(o.Content, field)
}

func lookup(v any, field string) (any, bool) {
	for _, part := range engine.SplitFieldPath(field) {
		if l, ok := v.([]any); ok {
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(l) {
				return nil, false
			}
			v = l[i]
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[part]; !ok {
			return nil, false
		}
	}
	return v, true
}

// str is the string at field ("" when absent); a number or a boolean is
// given as YAML writes it.
func (o *object) str(field string) string {
	v, ok := o.get(field)
	if !ok || v == nil {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case bool, int, int64, float64:
		return fmt.Sprint(v)
	}
	o.report(field, "not a string: left out")
	return ""
}

// boolean is the boolean at field; def when absent.
func (o *object) boolean(field string, def bool) bool {
	v, ok := o.get(field)
	if !ok || v == nil {
		return def
	}
	switch v := v.(type) {
	case bool:
		return v
	case string:
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	o.report(field, "not a boolean: left out")
	return def
}

// mapAt is the mapping at field (nil when absent).
func (o *object) mapAt(field string) map[string]any {
	v, _ := o.get(field)
	m, _ := v.(map[string]any)
	return m
}

// list is the list at field (nil when absent).
func (o *object) list(field string) []any {
	v, _ := o.get(field)
	l, _ := v.([]any)
	return l
}

// has tells whether field is set, without marking it read.
func (o *object) has(field string) bool {
	_, ok := lookup(o.Content, field)
	return ok
}

// leftovers reports every field under spec that was neither read nor
// reported: a field import does not know is never dropped silently.
func (o *object) leftovers(prefix string) {
	v, ok := lookup(o.Content, prefix)
	if !ok {
		return
	}
	o.walkLeft(prefix, v)
}

func (o *object) walkLeft(field string, v any) {
	if o.read[field] {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			o.walkLeft(subField(field, k), v[k])
		}
		return
	case []any:
		for i, e := range v {
			o.walkLeft(field+"["+strconv.Itoa(i)+"]", e)
		}
		return
	}
	o.report(field, "not carried over: engine import does not know this field")
}

// stringMap is a map of strings at field; other values are reported.
func (o *object) stringMap(field string) map[string]string {
	m := o.mapAt(field)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out[k] = v
		case bool, int, int64, float64:
			out[k] = fmt.Sprint(v)
		default:
			o.report(field+"."+k, "not a string: left out")
		}
	}
	return out
}

// subField is field's key k: field.k, or field["k"] when k holds a dot
// or a bracket.
func subField(field, k string) string {
	if strings.ContainsAny(k, ".[]\"") {
		return field + "[" + strconv.Quote(k) + "]"
	}
	return field + "." + k
}

// unmapped are fields with no equivalent, and why.
type unmapped [][2]string

// dropAll reports each field of u (under prefix) that the object sets.
func (o *object) dropAll(prefix string, u unmapped) {
	for _, f := range u {
		o.drop(prefix+f[0], f[1])
	}
}
