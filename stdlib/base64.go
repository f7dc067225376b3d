package stdlib

import (
	"encoding/base64"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// Base64 is the Starlark module base64 (RFC 4648).
//
//	base64.encode(data, url=False, pad=True) -> str
//	base64.decode(s, url=False) -> str
//
// url selects the URL-safe alphabet ("-_" instead of "+/"). decode accepts
// input with or without padding and ignores line breaks; it returns a str,
// which in Starlark may hold arbitrary bytes.
var Base64 = &starlarkstruct.Module{
	Name: "base64",
	Members: starlark.StringDict{
		"encode": newBuiltin("base64.encode", base64Encode),
		"decode": newBuiltin("base64.decode", base64Decode),
	},
}

var base64Module = Module{
	Name:  "base64",
	Doc:   "Base64 encoding (RFC 4648), as used by the data of Kubernetes Secrets. See also k8s.secret, which encodes string_data itself.",
	Value: Base64,
	Funcs: []Func{
		{"encode", "base64.encode(data, url=False, pad=True) -> str", `Returns the base64 encoding of data (str or bytes): with the URL-safe alphabet ("-_") when url is true, without trailing "=" when pad is false.`},
		{"decode", "base64.decode(s, url=False) -> str", "Returns the bytes that s (str or bytes) encodes, as a str. Padding is optional and line breaks are ignored; any other character outside the alphabet is an error."},
	},
}

func base64Encode(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		data stringOrBytes
		url  = false
		pad  = true
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "data", &data, "url?", &url, "pad?", &pad); err != nil {
		return nil, err
	}
	return starlark.String(base64Encoding(url, pad).EncodeToString([]byte(data))), nil
}

func base64Decode(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		s   stringOrBytes
		url = false
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "s", &s, "url?", &url); err != nil {
		return nil, err
	}
	out, err := decodeBase64(string(s), url)
	if err != nil {
		return nil, err
	}
	return starlark.String(out), nil
}

// decodeBase64 decodes s whether or not it is padded; the decoder already
// skips '\r' and '\n'.
func decodeBase64(s string, url bool) ([]byte, error) {
	s = strings.NewReplacer("\r", "", "\n", "").Replace(s)
	return base64Encoding(url, false).DecodeString(strings.TrimRight(s, "="))
}

func base64Encoding(url, pad bool) *base64.Encoding {
	switch {
	case url && pad:
		return base64.URLEncoding
	case url:
		return base64.RawURLEncoding
	case pad:
		return base64.StdEncoding
	}
	return base64.RawStdEncoding
}
