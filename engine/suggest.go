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
// does not have.
var missingKey = regexp.MustCompile(`^key ("(?:[^"\\]|\\.)*") not in dict$`)

// suggestParam adds `did you mean "KEY"?` to a script error that indexes
// ctx.params with a key the target does not have but a near one
// (ctx.params["replica"] when the key is "replicas"). Only an index
// written on params (ctx.params[...], params[...]) gets a suggestion: the
// message does not say which dict it was.
func (e *evaluation) suggestParam(err error, params map[string]any) error {
	var se *lstar.Error
	if !errors.As(err, &se) {
		return err
	}
	m := missingKey.FindStringSubmatch(se.Msg)
	if m == nil {
		return err
	}
	key, uerr := strconv.Unquote(m[1])
	if uerr != nil || !e.indexesParams(se.Pos.Filename(), int(se.Pos.Line), int(se.Pos.Col)) {
		return err
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	near := lstar.Nearest(key, keys)
	if near == "" {
		return err
	}
	out := *se
	out.Msg = fmt.Sprintf("key %q not in ctx.params (did you mean %q?)", key, near)
	return &out
}

// indexesParams says whether the script text at file:line:col (the "[" of
// an index expression, where starlark-go places the error) indexes a
// value named params.
func (e *evaluation) indexesParams(file string, line, col int) bool {
	src := e.fileNamed(file)
	if src == nil || line < 1 || col < 1 {
		return false
	}
	lines := strings.Split(string(src), "\n")
	if line > len(lines) || col > len(lines[line-1]) {
		return false
	}
	before := strings.TrimRight(lines[line-1][:col-1], " \t")
	return strings.HasSuffix(before, "params") && lines[line-1][col-1] == '['
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
