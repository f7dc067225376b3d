package stdlib

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// decodeYAML parses exactly one YAML document (or none, giving nil) into a
// JSON-shaped Go value.
func decodeYAML(data []byte) (any, error) {
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	var out any
	n := 0
	for _, doc := range docs {
		v, err := yamlDocument(doc)
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
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for i, doc := range docs {
		v, err := yamlDocument(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if v != nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// splitYAML cuts a YAML stream at its "---" lines, as kubectl does.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// yamlDocument converts one YAML document to a JSON-shaped value; integers
// become int64 and other numbers float64.
func yamlDocument(doc []byte) (any, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, flatten(err)
	}
	return decodeJSON(j)
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
