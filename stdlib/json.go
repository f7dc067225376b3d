package stdlib

import (
	starjson "go.starlark.net/lib/json"
)

// JSON is the Starlark module json, go.starlark.net/lib/json with its
// built-ins guarded like the rest of the stdlib.
//
//	json.encode(x) -> str
//	json.encode_indent(x, *, prefix="", indent="\t") -> str
//	json.decode(s, default=unset) -> value
//	json.indent(s, *, prefix="", indent="\t") -> str
//
// Like yaml.encode, json.encode writes a dict's keys in sorted order.
var JSON = qualify(starjson.Module)

var jsonModule = Module{
	Name:  "json",
	Doc:   "Encodes Starlark values as JSON and decodes JSON text (go.starlark.net/lib/json). Encoding writes dict keys in sorted order, so output is deterministic.",
	Value: JSON,
	Funcs: []Func{
		{"encode", "json.encode(x) -> str", "Returns the compact JSON encoding of x: None, bools, ints, floats, strings, dicts with string keys (written in sorted order), lists, tuples and structs. Non-finite floats are an error."},
		{"encode_indent", `json.encode_indent(x, *, prefix="", indent="\t") -> str`, "Like json.encode, but pretty-printed: each element on its own line, starting with prefix and indented by indent per level."},
		{"decode", "json.decode(s, default=unset) -> value", "Parses the JSON text s. Numbers with a fraction or exponent become floats, others ints; objects become new dicts. If s is not valid JSON, returns default when given and fails otherwise."},
		{"indent", `json.indent(s, *, prefix="", indent="\t") -> str`, "Re-formats the valid JSON text s in indented form, each line starting with prefix and indented by indent per level."},
	},
}
