//go:build !leanoperator

package cue

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"cuelang.org/go/cue"
)

// maxDepth bounds the nesting of objects, which are walked recursively.
const maxDepth = 1000

// prepare checks that obj is JSON-shaped and returns it in the canonical
// shape (map[string]any, []any, string, bool, int64, float64, nil), with
// its size in bytes (about its JSON encoding, for recycling). obj is
// returned as it is when it has that shape already; otherwise it is
// copied. A float or json.Number with an integral value is an integer, as
// in JSON.
func prepare(obj map[string]any) (map[string]any, int64, error) {
	size, fix, err := scan(obj, 0)
	if err != nil || !fix {
		return obj, size, err
	}
	return normalize(obj).(map[string]any), size, nil
}

// scan measures v and reports whether normalize must rewrite it.
func scan(v any, depth int) (size int64, fix bool, err error) {
	if depth > maxDepth {
		return 0, false, errors.New("object nested too deeply")
	}
	switch v := v.(type) {
	case nil:
		return 4, false, nil
	case bool:
		return 5, false, nil
	case string:
		return int64(len(v)) + 2, false, nil
	case int64:
		return 8, false, nil
	case int, int8, int16, int32, uint, uint8, uint16, uint32, uint64:
		return 8, true, nil
	case float32:
		return 8, true, checkFloat(float64(v))
	case float64:
		return 8, isIntegral(v), checkFloat(v)
	case json.Number:
		if _, err := v.Float64(); err != nil {
			return 0, false, fmt.Errorf("invalid number %q", string(v))
		}
		return int64(len(v)), true, nil
	case map[string]any:
		size = 2
		for k, x := range v {
			n, f, err := scan(x, depth+1)
			if err != nil {
				return 0, false, fmt.Errorf("%s: %w", strconv.Quote(k), err)
			}
			size += n + int64(len(k)) + 4
			fix = fix || f
		}
		return size, fix, nil
	case []any:
		size = 2
		for i, x := range v {
			n, f, err := scan(x, depth+1)
			if err != nil {
				return 0, false, fmt.Errorf("[%d]: %w", i, err)
			}
			size += n + 1
			fix = fix || f
		}
		return size, fix, nil
	case map[string]string:
		size = 2
		for k, x := range v {
			size += int64(len(k)+len(x)) + 6
		}
		return size, true, nil
	case []string:
		size = 2
		for _, x := range v {
			size += int64(len(x)) + 3
		}
		return size, true, nil
	case []map[string]any:
		size = 2
		for i, x := range v {
			n, _, err := scan(x, depth+1)
			if err != nil {
				return 0, false, fmt.Errorf("[%d]: %w", i, err)
			}
			size += n + 1
		}
		return size, true, nil
	}
	return 0, false, fmt.Errorf("unsupported value of type %T", v)
}

func checkFloat(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("invalid number %v", f)
	}
	return nil
}

func isIntegral(f float64) bool {
	return f == math.Trunc(f) && math.Abs(f) < 1<<53
}

// normalize copies v into the canonical shape; v has passed scan.
func normalize(v any) any {
	switch v := v.(type) {
	case int:
		return int64(v)
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case uint:
		return normalizeUint(uint64(v))
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case uint64:
		return normalizeUint(v)
	case float32:
		return normalize(float64(v))
	case float64:
		if isIntegral(v) {
			return int64(v)
		}
		return v
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return normalize(f)
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = normalize(x)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = normalize(x)
		}
		return l
	case map[string]string:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = x
		}
		return m
	case []string:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = x
		}
		return l
	case []map[string]any:
		l := make([]any, len(v))
		for i, x := range v {
			l[i] = normalize(x)
		}
		return l
	}
	return v
}

func normalizeUint(u uint64) any {
	if u > math.MaxInt64 {
		return float64(u)
	}
	return int64(u)
}

// export turns a concrete CUE value, defaults taken, into a JSON-shaped Go
// value.
func export(v cue.Value) (any, error) {
	if d, ok := v.Default(); ok {
		v = d
	}
	switch v.Kind() {
	case cue.StructKind:
		it, err := v.Fields()
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for it.Next() {
			x, err := export(it.Value())
			if err != nil {
				return nil, err
			}
			m[it.Selector().Unquoted()] = x
		}
		return m, nil
	case cue.ListKind:
		it, err := v.List()
		if err != nil {
			return nil, err
		}
		l := []any{}
		for it.Next() {
			x, err := export(it.Value())
			if err != nil {
				return nil, err
			}
			l = append(l, x)
		}
		return l, nil
	case cue.StringKind:
		return v.String()
	case cue.IntKind:
		if i, err := v.Int64(); err == nil {
			return i, nil
		}
		return v.Float64() // beyond int64: as JSON would carry it
	case cue.FloatKind:
		return v.Float64()
	case cue.BoolKind:
		return v.Bool()
	case cue.NullKind:
		return nil, nil
	case cue.BytesKind:
		b, err := v.Bytes()
		return base64.StdEncoding.EncodeToString(b), err
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: value is not concrete", v.Path())
}
