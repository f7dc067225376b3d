package stdlib

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"hash"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// Hash is the Starlark module hash: hex digests of a str or bytes.
//
//	hash.sha256(data) -> str
//	hash.sha512(data) -> str
//	hash.sha1(data) -> str
//	hash.md5(data) -> str
//
// A typical use is a checksum annotation that rolls a Deployment when its
// ConfigMap changes: hash.sha256(yaml.encode(cm["data"])).
var Hash = &starlarkstruct.Module{
	Name: "hash",
	Members: starlark.StringDict{
		"sha256": hashBuiltin("hash.sha256", sha256.New),
		"sha512": hashBuiltin("hash.sha512", sha512.New),
		"sha1":   hashBuiltin("hash.sha1", sha1.New),
		"md5":    hashBuiltin("hash.md5", md5.New),
	},
}

var hashModule = Module{
	Name:  "hash",
	Doc:   "Hex digests of strings, e.g. for checksum annotations that roll a workload when its configuration changes. sha1 and md5 are for compatibility with existing names, not for security.",
	Value: Hash,
	Funcs: []Func{
		{"sha256", "hash.sha256(data) -> str", "Returns the SHA-256 digest of data (str or bytes) as 64 lowercase hex digits."},
		{"sha512", "hash.sha512(data) -> str", "Returns the SHA-512 digest of data (str or bytes) as 128 lowercase hex digits."},
		{"sha1", "hash.sha1(data) -> str", "Returns the SHA-1 digest of data (str or bytes) as 40 lowercase hex digits."},
		{"md5", "hash.md5(data) -> str", "Returns the MD5 digest of data (str or bytes) as 32 lowercase hex digits."},
	},
}

// hashBuiltin returns a built-in that hex-encodes the digest of its argument.
func hashBuiltin(name string, newHash func() hash.Hash) *starlark.Builtin {
	return newBuiltin(name, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var data stringOrBytes
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &data); err != nil {
			return nil, err
		}
		h := newHash()
		h.Write([]byte(data))
		return starlark.String(hex.EncodeToString(h.Sum(nil))), nil
	})
}
