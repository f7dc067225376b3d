//go:build !leanoperator

package cue

import (
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
)

// Format returns src, a CUE file, formatted as `cue fmt` formats it. name
// is the file's path, for errors: a file that does not parse is an error
// naming name:line:col.
func Format(name string, src []byte) ([]byte, error) {
	f, err := parser.ParseFile(name, src, parser.ParseComments)
	if err != nil {
		return nil, withPositions(err)
	}
	return format.Node(f)
}
