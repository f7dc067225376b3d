package starlark

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// ToValue converts a JSON-shaped Go value (as produced by encoding/json or
// sigs.k8s.io/yaml: map[string]any, []any, string, bool, float64, int64,
// json.Number, nil) into a Starlark value. Maps become dicts with keys in
// sorted order, so that iteration in scripts is deterministic.
func ToValue(v any) (starlark.Value, error) {
	switch v := v.(type) {
	case nil:
		return starlark.None, nil
	case starlark.Value:
		return v, nil
	case bool:
		return starlark.Bool(v), nil
	case string:
		return starlark.String(v), nil
	case int:
		return starlark.MakeInt(v), nil
	case int32:
		return starlark.MakeInt64(int64(v)), nil
	case int64:
		return starlark.MakeInt64(v), nil
	case uint64:
		return starlark.MakeUint64(v), nil
	case uint32:
		return starlark.MakeUint64(uint64(v)), nil
	case float32:
		return ToValue(float64(v))
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return starlark.MakeInt64(int64(v)), nil
		}
		return starlark.Float(v), nil
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return starlark.MakeInt64(i), nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", v, err)
		}
		return starlark.Float(f), nil
	case []any:
		elems := make([]starlark.Value, len(v))
		for i, e := range v {
			sv, err := ToValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case []map[string]any:
		elems := make([]starlark.Value, len(v))
		for i, e := range v {
			sv, err := ToValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = sv
		}
		return starlark.NewList(elems), nil
	case []string:
		elems := make([]starlark.Value, len(v))
		for i, e := range v {
			elems[i] = starlark.String(e)
		}
		return starlark.NewList(elems), nil
	case map[string]string:
		d := starlark.NewDict(len(v))
		for _, k := range sortedKeys(v) {
			_ = d.SetKey(starlark.String(k), starlark.String(v[k]))
		}
		return d, nil
	case map[string]any:
		d := starlark.NewDict(len(v))
		for _, k := range sortedKeys(v) {
			sv, err := ToValue(v[k])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			_ = d.SetKey(starlark.String(k), sv)
		}
		return d, nil
	}
	return nil, fmt.Errorf("cannot convert Go value of type %T to Starlark", v)
}

// FromValue converts a Starlark value into a JSON-shaped Go value:
// map[string]any, []any, string, bool, int64, float64 or nil. Dicts must have
// string keys; structs become maps; lists and tuples become []any; bytes
// become strings. Anything else (functions, sets, ranges, ...) is an error
// that names the path to the value ("spec: ports: [2]: cannot convert ...").
//
// The conversion is bounded: values nested deeper than 256 levels (a list
// that contains itself) or with more than 16Mi elements in all (a small
// value that shares one list many times over) are errors, not hangs.
func FromValue(v starlark.Value) (any, error) {
	var m measurer
	if n := m.measure(v, 0).values; n > maxNodes {
		return nil, fmt.Errorf("value too large: more than %d elements", maxNodes)
	}
	c := converter{budget: maxNodes}
	return c.fromValue(v, 0)
}

const (
	// maxDepth bounds the nesting of converted values, so that a
	// self-containing list cannot recurse forever.
	maxDepth = 256
	// maxNodes bounds the number of values FromValue converts.
	maxNodes = 1 << 24
)

// converter turns Starlark values into Go values within a budget of
// values converted. Callers measure large values first, so the budget
// bounds the work of converting values that are not measured.
type converter struct {
	budget    int64 // values left to convert
	exhausted bool  // the budget ran out
	// size is the length of the JSON encoding of what was converted, as
	// encoding/json writes it without HTML escaping: what Limits.MaxBytes
	// bounds.
	size int64
}

func (c *converter) fromValue(v starlark.Value, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels (is it cyclic?)", maxDepth)
	}
	if c.budget--; c.budget < 0 {
		c.exhausted = true
		return nil, fmt.Errorf("value too large")
	}
	switch v := v.(type) {
	case starlark.NoneType:
		c.size += 4
		return nil, nil
	case starlark.Bool:
		c.size += 5
		if v {
			c.size--
		}
		return bool(v), nil
	case starlark.String:
		c.size += jsonStringSize(string(v))
		return string(v), nil
	case starlark.Bytes:
		c.size += jsonStringSize(string(v))
		return string(v), nil
	case starlark.Int:
		if i, ok := v.Int64(); ok {
			var buf [24]byte
			c.size += int64(len(strconv.AppendInt(buf[:0], i, 10)))
			return i, nil
		}
		return nil, fmt.Errorf("integer %s does not fit in 64 bits", v)
	case starlark.Float:
		f := float64(v)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("float %s has no JSON form", v)
		}
		var buf [32]byte
		c.size += int64(len(strconv.AppendFloat(buf[:0], f, 'g', -1, 64)))
		return f, nil
	case *starlark.Dict:
		return c.fromDict(v, depth)
	case *starlarkstruct.Struct:
		m := make(map[string]any)
		names := v.AttrNames()
		c.size += 2 + max(int64(len(names))-1, 0)
		for _, name := range names {
			c.size += jsonStringSize(name) + 1
			av, err := v.Attr(name)
			if err != nil {
				return nil, err
			}
			gv, err := c.fromValue(av, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			m[name] = gv
		}
		return m, nil
	case *starlark.List:
		return c.fromSequence(v, depth)
	case starlark.Tuple:
		return c.fromSequence(v, depth)
	}
	return nil, fmt.Errorf("cannot convert %s to data", v.Type())
}

// fromDict converts a dict with string keys. It loops over the keys rather
// than over Entries, whose closure would cost allocations per dict.
func (c *converter) fromDict(d *starlark.Dict, depth int) (any, error) {
	m := make(map[string]any, d.Len())
	c.size += 2 + max(int64(d.Len())-1, 0) // braces and commas
	for _, key := range d.Keys() {
		k, ok := key.(starlark.String)
		if !ok {
			return nil, fmt.Errorf("dict key %s is a %s, want string", key, key.Type())
		}
		c.size += jsonStringSize(string(k)) + 1 // and the colon
		val, _, err := d.Get(key)
		if err != nil {
			return nil, err
		}
		gv, err := c.fromValue(val, depth+1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", string(k), err)
		}
		m[string(k)] = gv
	}
	return m, nil
}

// fromSequence converts a list or tuple. Other Indexables (range, strings)
// are deliberately not sequences here: range(1 << 40) is cheap in Starlark
// and would be a terabyte as data.
func (c *converter) fromSequence(v starlark.Indexable, depth int) (any, error) {
	n := v.Len()
	c.size += 2 + max(int64(n)-1, 0) // brackets and commas
	s := make([]any, n)
	for i := 0; i < n; i++ {
		gv, err := c.fromValue(v.Index(i), depth+1)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		s[i] = gv
	}
	return s, nil
}

// Int64 returns a Starlark int as an int64, or an error naming what.
func Int64(what string, v starlark.Value) (int64, error) {
	i, ok := v.(starlark.Int)
	if !ok {
		return 0, fmt.Errorf("%s: got %s, want int", what, v.Type())
	}
	n, ok := i.Int64()
	if !ok {
		return 0, fmt.Errorf("%s: %s out of range", what, i)
	}
	return n, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonStringSize is the length of s as a JSON string, as encoding/json
// writes it without HTML escaping: quotes, and escapes for quotes,
// backslashes and control characters (\u00XX but for \n, \r, \t).
func jsonStringSize(s string) int64 {
	n := int64(len(s)) + 2
	for i := 0; i < len(s); i++ {
		n += int64(jsonEscapeExtra[s[i]])
	}
	return n
}

// jsonEscapeExtra is how many bytes escaping adds to a byte of a JSON string.
var jsonEscapeExtra = func() (t [256]uint8) {
	for b := range 0x20 {
		t[b] = 5 // \u00XX
	}
	for _, b := range []byte{'"', '\\', '\n', '\r', '\t'} {
		t[b] = 1
	}
	return t
}()
