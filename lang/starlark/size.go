package starlark

import (
	"math"
	"strconv"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// extent is what converting a value would produce: a lower bound of its
// JSON-encoded size and the number of values in it. Both saturate rather
// than overflow.
type extent struct{ bytes, values int64 }

func (e *extent) add(o extent) {
	e.bytes = satAdd(e.bytes, o.bytes)
	e.values = satAdd(e.values, o.values)
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// measurer computes extents in time linear in the number of distinct
// containers, by remembering the extent of each list, tuple, dict and
// struct it has seen. So a value that shares one list 2^60 times over,
// which Starlark builds in 60 steps, is found too large at once instead of
// being expanded.
type measurer struct {
	seen map[any]extent
}

// tupleKey identifies a non-empty tuple by its backing array.
type tupleKey struct {
	first *starlark.Value
	n     int
}

// measure returns v's extent. Values that cannot be converted count as
// nothing (the conversion reports them); nesting deeper than maxDepth is
// cut off there (the conversion reports that too).
func (m *measurer) measure(v starlark.Value, depth int) extent {
	if depth > maxDepth {
		return extent{}
	}
	var key any
	switch v := v.(type) {
	case starlark.NoneType:
		return extent{4, 1}
	case starlark.Bool:
		if v {
			return extent{4, 1}
		}
		return extent{5, 1}
	case starlark.String:
		return extent{int64(len(v)) + 2, 1}
	case starlark.Bytes:
		return extent{int64(len(v)) + 2, 1}
	case starlark.Int:
		if i, ok := v.Int64(); ok {
			return extent{int64(len(strconv.FormatInt(i, 10))), 1}
		}
		return extent{1, 1}
	case starlark.Float:
		return extent{1, 1}
	case *starlark.List, *starlark.Dict, *starlarkstruct.Struct:
		key = v
	case starlark.Tuple:
		if len(v) == 0 {
			return extent{2, 1}
		}
		key = tupleKey{&v[0], len(v)}
	default:
		return extent{}
	}
	if e, ok := m.seen[key]; ok {
		return e
	}
	if m.seen == nil {
		m.seen = make(map[any]extent)
	}
	// A container costs its brackets, a comma between elements, and for
	// dicts and structs a quoted key and a colon per entry.
	e := extent{2, 1}
	switch v := v.(type) {
	case *starlark.List:
		e.bytes += int64(max(v.Len()-1, 0))
		for i := 0; i < v.Len(); i++ {
			e.add(m.measure(v.Index(i), depth+1))
		}
	case starlark.Tuple:
		e.bytes += int64(len(v) - 1)
		for _, x := range v {
			e.add(m.measure(x, depth+1))
		}
	case *starlark.Dict:
		e.bytes += int64(max(v.Len()-1, 0))
		for key, val := range v.Entries() {
			// Keys must be strings (the conversion checks), and are
			// not values of their own.
			if k, ok := key.(starlark.String); ok {
				e.add(extent{bytes: int64(len(k)) + 3})
			}
			e.add(m.measure(val, depth+1))
		}
	case *starlarkstruct.Struct:
		names := v.AttrNames()
		e.bytes += int64(max(len(names)-1, 0))
		for _, name := range names {
			e.add(extent{bytes: int64(len(name)) + 3})
			if av, err := v.Attr(name); err == nil {
				e.add(m.measure(av, depth+1))
			}
		}
	}
	m.seen[key] = e
	return e
}
