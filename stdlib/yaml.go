package stdlib

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// YAML is the Starlark module yaml, which converts between YAML text and
// Starlark values the way kubectl does (sigs.k8s.io/yaml: YAML is read as
// JSON, so keys become strings and maps come out with sorted keys).
//
//	yaml.decode(s) -> value          # one document; an empty one gives None
//	yaml.decode_all(s) -> list       # a "---"-separated stream; empty documents are skipped
//	yaml.encode(value) -> str        # keys sorted, like kubectl get -o yaml
//	yaml.encode_all(values) -> str   # documents joined by "---" lines
//
// Decoding rejects duplicate keys. Integers decode as int and other numbers as
// float. As in Kubernetes, YAML 1.1 rules apply: unquoted yes, no, on, off,
// y and n are booleans (and become "true" or "false" when used as keys).
var YAML = &starlarkstruct.Module{
	Name: "yaml",
	Members: starlark.StringDict{
		"decode":     newBuiltin("yaml.decode", yamlDecode),
		"decode_all": newBuiltin("yaml.decode_all", yamlDecodeAll),
		"encode":     newBuiltin("yaml.encode", yamlEncode),
		"encode_all": newBuiltin("yaml.encode_all", yamlEncodeAll),
	},
}

var yamlModule = Module{
	Name:  "yaml",
	Doc:   "Converts between YAML text and Starlark values the way kubectl does: YAML is read as JSON (keys become strings, dicts come out with sorted keys) and written with sorted keys, so output is deterministic.",
	Value: YAML,
	Funcs: []Func{
		{"decode", "yaml.decode(s) -> value", "Parses s (str or bytes) as a single YAML document and returns it as dicts, lists, strings, ints, floats, bools and None. As in Kubernetes, YAML 1.1 rules apply (unquoted yes/no/on/off/y/n are booleans). An empty document gives None; more than one document, or a duplicate key, is an error."},
		{"decode_all", "yaml.decode_all(s) -> list", `Parses a stream of YAML documents separated by "---" lines and returns them as a list. Documents that are empty or null are skipped, so a file of Kubernetes manifests gives one element per object.`},
		{"encode", "yaml.encode(value) -> str", "Renders a JSON-shaped value (dict, list, str, int, float, bool, None, struct) as YAML with sorted keys, ending in a newline."},
		{"encode_all", "yaml.encode_all(values) -> str", `Renders each element of a list as a YAML document and joins them with "---" lines, as kubectl does for several objects. An empty list gives "".`},
	},
}

func yamlDecode(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s stringOrBytes
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &s); err != nil {
		return nil, err
	}
	v, err := decodeYAML([]byte(s))
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(v)
}

func yamlDecodeAll(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s stringOrBytes
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &s); err != nil {
		return nil, err
	}
	docs, err := decodeYAMLStream([]byte(s))
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(docs)
}

func yamlEncode(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x starlark.Value
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &x); err != nil {
		return nil, err
	}
	out, err := encodeYAML(x)
	if err != nil {
		return nil, err
	}
	return starlark.String(out), nil
}

func yamlEncodeAll(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var docs starlark.Iterable
	if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &docs); err != nil {
		return nil, err
	}
	if _, ok := docs.(starlark.IterableMapping); ok {
		return nil, fmt.Errorf("got %s, want list", docs.Type())
	}
	var sb strings.Builder
	iter := docs.Iterate()
	defer iter.Done()
	var x starlark.Value
	for i := 0; iter.Next(&x); i++ {
		out, err := encodeYAML(x)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if i > 0 {
			sb.WriteString("---\n")
		}
		sb.WriteString(out)
	}
	return starlark.String(sb.String()), nil
}

// YAMLDocument is one document of a YAML (or JSON) stream.
type YAMLDocument struct {
	Line  int // line of the document's first line of content
	Value any // JSON-shaped: map[string]any, []any, string, bool, int64, float64
}

// DecodeYAMLStream decodes every document of a YAML (or JSON) stream the
// way kubectl does: the stream is cut at its "---" lines
// (k8s.io/apimachinery's YAMLReader) and each document is read by
// sigs.k8s.io/yaml, so YAML 1.1 booleans (yes, no, on, off, y, n) are
// booleans, as values and as keys, and duplicate keys are errors. Numbers
// are read as JSON numbers: whole ones that fit (1, 1.0, 1e3) are int64,
// others float64. Empty and null documents are skipped. It is the one decoder of the core: ctx.inputs and the yaml module
// both read files with it. Errors name the document's index and its line in
// the whole stream.
func DecodeYAMLStream(data []byte) ([]YAMLDocument, error) {
	chunks, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	out := []YAMLDocument{}
	for i, c := range chunks {
		v, err := c.decode()
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if v != nil {
			out = append(out, YAMLDocument{Line: c.line, Value: v})
		}
	}
	return out, nil
}

// decodeYAML parses exactly one YAML document (or none, giving nil) into a
// JSON-shaped Go value.
func decodeYAML(data []byte) (any, error) {
	chunks, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	var out any
	n := 0
	for _, c := range chunks {
		v, err := c.decode()
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		if n++; n > 1 {
			return nil, errors.New("input holds more than one document (use yaml.decode_all)")
		}
		out = v
	}
	return out, nil
}

// decodeYAMLStream parses every non-empty document of a YAML stream.
func decodeYAMLStream(data []byte) ([]any, error) {
	docs, err := DecodeYAMLStream(data)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(docs))
	for i, d := range docs {
		out[i] = d.Value
	}
	return out, nil
}

// yamlChunk is one document of a stream: its text and the line it starts on.
type yamlChunk struct {
	text  []byte
	start int // line of the chunk's first line
	line  int // line of its first line of content
}

// splitYAML cuts a YAML stream at its "---" lines, as kubectl does, and
// keeps where each document starts.
func splitYAML(data []byte) ([]yamlChunk, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var chunks []yamlChunk
	pos := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return nil, err
		}
		// The reader drops separator lines that end a document, keeps
		// one that starts it, and ends the last line with "\n": skip
		// dropped lines to find where the document starts in data.
		body := bytes.TrimSuffix(doc, []byte("\n"))
		for pos < len(data) && !bytes.HasPrefix(data[pos:], body) {
			nl := bytes.IndexByte(data[pos:], '\n')
			if nl < 0 {
				pos = len(data)
				break
			}
			pos += nl + 1
		}
		start := bytes.Count(data[:pos], []byte("\n")) + 1
		chunks = append(chunks, yamlChunk{text: doc, start: start, line: start + contentOffset(doc)})
		pos = min(pos+len(doc), len(data))
	}
}

// contentOffset counts the lines before the first one of doc that holds
// content (not blank, a comment, a directive or a "---" line).
func contentOffset(doc []byte) int {
	n := 0
	for line := range bytes.Lines(doc) {
		t := bytes.TrimSpace(line)
		sep := bytes.HasPrefix(t, []byte("---")) && (len(t) == 3 || t[3] == ' ' || t[3] == '#')
		if len(t) > 0 && t[0] != '#' && t[0] != '%' && !sep {
			return n
		}
		n++
	}
	return 0
}

// decode converts the document to a JSON-shaped value. Aliases may not
// expand it beyond YAMLBudget values.
func (c yamlChunk) decode() (any, error) {
	j, err := yaml.YAMLToJSONStrict(c.text)
	if err != nil {
		return nil, c.error(err)
	}
	v, err := decodeJSON(j)
	if err != nil {
		return nil, c.error(err)
	}
	if n, budget := countValues(v), YAMLBudget(len(c.text)); n > budget {
		return nil, c.error(fmt.Errorf("aliases expand the document to %d values, more than %d", n, budget))
	}
	return v, nil
}

// YAMLError is an error at a line of a YAML stream.
type YAMLError struct {
	Line int    // counted in the whole stream, from 1
	Msg  string // what is wrong, without the line
	text string // the error as the YAML library words it
}

func (e *YAMLError) Error() string { return e.text }

// lineRE matches the lines errors of sigs.k8s.io/yaml name; yamlErrorRE
// those errors.
var lineRE = regexp.MustCompile(`\bline [0-9]+\b`)

var yamlErrorRE = regexp.MustCompile(`^yaml: (?:unmarshal errors: )?line ([0-9]+): (.*)$`)

// error is err, one line long, as a YAMLError: at the line it names, else
// at the document's first line.
func (c yamlChunk) error(err error) error {
	// The library counts lines in the document: count them in the stream.
	text := lineRE.ReplaceAllStringFunc(flatten(err).Error(), func(m string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+c.start-1)
	})
	if strings.Contains(text, "unsupported map key") || strings.Contains(text, "invalid map key") {
		// sigs.k8s.io/yaml shows the key and its value, which may be a
		// Secret's: say what is wrong without them.
		text = "yaml: a mapping key is null, a list or a map (keys are strings, numbers or booleans)"
	}
	if m := yamlErrorRE.FindStringSubmatch(text); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return &YAMLError{Line: n, Msg: m[2], text: text}
		}
	}
	return &YAMLError{Line: c.line, Msg: text, text: fmt.Sprintf("line %d: %s", c.line, text)}
}

// YAMLBudget bounds how many values a document of size bytes may expand to
// through aliases (a "billion laughs").
func YAMLBudget(size int) int { return 100*size + 10_000 }

// countValues counts the values of a JSON-shaped value.
func countValues(v any) int {
	n := 1
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			n += countValues(e)
		}
	case []any:
		for _, e := range v {
			n += countValues(e)
		}
	}
	return n
}

// flatten puts a multi-line YAML error on one line:
// "yaml: unmarshal errors: line 2: key "a" already set in map".
func flatten(err error) error {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		return err
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return errors.New(strings.Join(lines, " "))
}

// encodeYAML renders a Starlark value as YAML with sorted keys.
func encodeYAML(x starlark.Value) (string, error) {
	v, err := lstar.FromValue(x)
	if err != nil {
		return "", err
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// decodeJSON parses JSON text into a JSON-shaped Go value in which integers
// are int64 and other numbers float64 (encoding/json alone would give float64
// for both, losing precision above 2^53).
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("unexpected data after JSON value")
	}
	return normalizeNumbers(v)
}

// normalizeNumbers replaces, in place, every json.Number in v by an int64 when
// it is an integer that fits, and by a float64 otherwise.
func normalizeNumbers(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return f, nil
	case map[string]any:
		for k, e := range v {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			v[k] = n
		}
	case []any:
		for i, e := range v {
			n, err := normalizeNumbers(e)
			if err != nil {
				return nil, err
			}
			v[i] = n
		}
	}
	return v, nil
}
