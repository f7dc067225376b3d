package stdlib

import (
	"go.starlark.net/starlarkstruct"
)

// Struct is the Starlark built-in struct(**fields), starlarkstruct.Make: an
// immutable record whose fields are read as attributes.
//
//	s = struct(name="web", replicas=2)
//	s.name  # "web"
var Struct = newBuiltin("struct", starlarkstruct.Make)

var structModule = Module{
	Name:  "struct",
	Doc:   "Builds immutable records with named fields, handy for grouping helpers or settings; yaml.encode and json.encode render them as objects.",
	Value: Struct,
	Funcs: []Func{
		{"struct", "struct(**fields) -> struct", "Returns a new struct whose attributes are the keyword arguments. Structs compare equal when their fields do, and cannot be changed after creation."},
	},
}
