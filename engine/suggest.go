package engine

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// missingKey is starlark-go's message for indexing a dict with a key it
// does not have; dictAttr for reading a dict's attribute that is no
// method (ctx.params.replicas, as if params were a struct).
var (
	missingKey = regexp.MustCompile(`^key ("(?:[^"\\]|\\.)*") not in dict$`)
	dictAttr   = regexp.MustCompile(`^dict has no \.([A-Za-z_][A-Za-z0-9_]*) field or method$`)
)

// suggestParam adds `did you mean "KEY"?` to a script error that reads a
// key of ctx.params the target does not have, ctx.params["replica"] when
// the key is "replicas", and says how to read a key that exists when the
// script reads it as an attribute (ctx.params.replicas). Only an index or
// attribute written on params (ctx.params[...], params.x) gets a
// suggestion: the message does not say which dict it was.
func (e *evaluation) suggestParam(err error, params map[string]any) error {
	var se *lstar.Error
	if !errors.As(err, &se) {
		return err
	}
	var key, op string
	if m := missingKey.FindStringSubmatch(se.Msg); m != nil {
		k, uerr := strconv.Unquote(m[1])
		if uerr != nil {
			return err
		}
		key, op = k, "["
	} else if m := dictAttr.FindStringSubmatch(se.Msg); m != nil {
		key, op = m[1], "."
	} else {
		return err
	}
	if !e.onParams(se.Pos.Filename(), int(se.Pos.Line), int(se.Pos.Col), op) {
		return err
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	out := *se
	_, exists := params[key]
	switch near := lstar.Nearest(key, keys); {
	case op == "." && exists:
		out.Msg = fmt.Sprintf("%s (ctx.params is a dict: did you mean ctx.params[%q]?)", se.Msg, key)
	case op == "." && near != "":
		out.Msg = fmt.Sprintf("%s (ctx.params is a dict: did you mean ctx.params[%q]?)", se.Msg, near)
	case op == "[" && near != "":
		out.Msg = fmt.Sprintf("key %q not in ctx.params (did you mean %q?)", key, near)
	default:
		return err
	}
	return &out
}

// onParams says whether the script text at file:line:col, where
// starlark-go places the error of an index ("[") or an attribute ("."),
// is op applied to a value named params.
func (e *evaluation) onParams(file string, line, col int, op string) bool {
	src := e.fileNamed(file)
	if src == nil || line < 1 || col < 1 {
		return false
	}
	lines := strings.Split(string(src), "\n")
	if line > len(lines) || col > len(lines[line-1]) {
		return false
	}
	before := strings.TrimRight(lines[line-1][:col-1], " \t")
	return strings.HasSuffix(before, "params") && strings.HasPrefix(lines[line-1][col-1:], op)
}

// fileNamed returns the file of a snapshot that messages name file, or nil.
func (e *evaluation) fileNamed(file string) []byte {
	for name, s := range e.snaps {
		if s == nil {
			continue
		}
		for p, b := range s.Files {
			if s.FileName(name, p) == file {
				return b
			}
		}
	}
	return nil
}
