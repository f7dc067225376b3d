package stdlib

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

// The patch functions below are shared by the k8s module and by the engine,
// which applies a target's static patches with them; both must patch an
// object the same way. Each takes JSON-shaped values (map[string]any, []any,
// string, bool, int64, float64, nil), leaves its arguments untouched and
// returns a new JSON-shaped object in which every whole number is an int64 and
// every other number a float64.

// maxPatchedSize bounds, in bytes of JSON, the object a JSON patch may build,
// so that a few "copy" operations cannot exhaust memory.
const maxPatchedSize = 16 << 20

// MergePatch applies the JSON merge patch patch (RFC 7386) to obj: objects
// merge recursively, a null value deletes its key, and any other value,
// including a list, replaces what obj had.
func MergePatch(obj, patch map[string]any) (map[string]any, error) {
	doc, err := marshalObject("object", obj)
	if err != nil {
		return nil, err
	}
	p, err := marshalObject("patch", patch)
	if err != nil {
		return nil, err
	}
	out, err := jsonpatch.MergePatch(doc, p)
	if err != nil {
		return nil, err
	}
	return unmarshalObject(out)
}

// JSONPatch applies the JSON patch ops (RFC 6902: a list of operations such as
// {"op": "replace", "path": "/spec/replicas", "value": 3}) to obj, in order.
// An error names the failing operation by its index in ops, counting from 0:
// `op 1: replace "/spec/x": path not found`. Negative array indices count
// from the end, as in kubectl.
func JSONPatch(obj map[string]any, ops []any) (map[string]any, error) {
	doc, err := marshalObject("object", obj)
	if err != nil {
		return nil, err
	}
	opts := jsonpatch.NewApplyOptions()
	opts.SupportNegativeIndices = true
	opts.AccumulatedCopySizeLimit = maxPatchedSize
	opts.EscapeHTML = false
	for i, op := range ops {
		desc, err := checkOperation(op)
		if err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		raw, err := json.Marshal([]any{op})
		if err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		p, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		// Applying one operation at a time costs a re-encoding of the
		// document per operation, which buys errors that say which one failed.
		before := doc
		doc, err = p.ApplyWithOptions(doc, opts)
		if err != nil {
			if errors.Is(err, jsonpatch.ErrTestFailed) {
				return nil, fmt.Errorf("op %d: %s: %w", i, desc, testFailure(before, op.(map[string]any)))
			}
			return nil, fmt.Errorf("op %d: %s: %w", i, desc, explainPatchError(err))
		}
		if len(doc) > maxPatchedSize {
			return nil, fmt.Errorf("op %d: %s: result exceeds %d bytes", i, desc, maxPatchedSize)
		}
	}
	return unmarshalObject(doc)
}

// checkOperation validates the shape of one JSON patch operation and returns
// a short description of it, such as `replace "/spec/replicas"`.
func checkOperation(op any) (string, error) {
	m, ok := op.(map[string]any)
	if !ok {
		return "", fmt.Errorf("got %s, want dict", typeName(op))
	}
	kind, _ := m["op"].(string)
	path, ok := m["path"].(string)
	if !ok {
		return "", fmt.Errorf(`%q: missing string "path"`, kind)
	}
	desc := fmt.Sprintf("%s %q", kind, path)
	switch kind {
	case "add", "replace", "test":
		if _, ok := m["value"]; !ok {
			return "", fmt.Errorf(`%s: missing "value"`, desc)
		}
	case "move", "copy":
		from, ok := m["from"].(string)
		if !ok {
			return "", fmt.Errorf(`%s: missing string "from"`, desc)
		}
		desc = fmt.Sprintf("%s %q to %q", kind, from, path)
	case "remove":
	default:
		return "", fmt.Errorf("unknown op %q (want add, remove, replace, move, copy or test)", kind)
	}
	return desc, nil
}

// explainPatchError rewords json-patch's errors into short phrases.
func explainPatchError(err error) error {
	var sizeErr *jsonpatch.AccumulatedCopySizeError
	switch {
	case errors.As(err, &sizeErr):
		return fmt.Errorf("copies exceed %d bytes", maxPatchedSize)
	case errors.Is(err, jsonpatch.ErrInvalidIndex):
		return errors.New("array index out of range")
	case errors.Is(err, jsonpatch.ErrMissing):
		return errors.New("path not found")
	}
	return errors.New(strings.TrimSuffix(err.Error(), ": "+jsonpatch.ErrMissing.Error()))
}

// testFailure says how the value a failed "test" operation looked at differs
// from the one it wanted: `test failed: got 2, want 3`.
func testFailure(doc []byte, op map[string]any) error {
	want, _ := json.Marshal(op["value"])
	got := "nothing"
	if v, err := decodeJSON(doc); err == nil {
		if found, ok := pointerValue(v, op["path"].(string)); ok {
			b, _ := json.Marshal(found)
			got = string(b)
		}
	}
	return fmt.Errorf("test failed: got %s, want %s", got, want)
}

// pointerValue returns the value at a JSON pointer (RFC 6901) in v.
func pointerValue(v any, pointer string) (any, bool) {
	if pointer == "" {
		return v, true
	}
	tokens := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	for _, tok := range tokens {
		tok = unescape.Replace(tok)
		switch c := v.(type) {
		case map[string]any:
			e, ok := c[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// marshalObject encodes obj as JSON, with nil as the empty object.
func marshalObject(what string, obj map[string]any) ([]byte, error) {
	if obj == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// unmarshalObject decodes a JSON object into a JSON-shaped map.
func unmarshalObject(data []byte) (map[string]any, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("patched document is a %s, want an object", typeName(v))
	}
	return m, nil
}
