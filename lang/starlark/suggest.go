package starlark

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
)

// Nearest returns the candidate closest to name by edit distance (ignoring
// case), or "" when none is close enough to be a likely typo: at most one
// edit in three characters. Ties go to the candidate that sorts first, so
// the suggestion is deterministic.
//
// No library in the module graph offers an edit distance (starlark-go's
// spell package, which suggests attribute names, is internal), and the
// function is a dozen lines.
func Nearest(name string, candidates []string) string {
	best, bestD := "", max(1, len(name)/3)+1
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		if c == name {
			continue
		}
		if d := distance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, over bytes.
func distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			prev, row[j] = row[j], min(row[j]+1, row[j-1]+1, prev+cost)
		}
	}
	return row[len(b)]
}

// undefinedPrefix starts the resolver's message for a name that is not
// defined.
const undefinedPrefix = "undefined: "

// suggestNames adds "(did you mean NAME?)" to the resolver's errors about
// undefined names that are a typo of a predeclared name (a stdlib module,
// a built-in function).
func (in *Interpreter) suggestNames(err error) error {
	var list resolve.ErrorList
	if !errors.As(err, &list) {
		return err
	}
	var names []string
	for name := range in.predeclared {
		names = append(names, name)
	}
	for name := range starlark.Universe {
		names = append(names, name)
	}
	out := make(resolve.ErrorList, len(list))
	for i, e := range list {
		if name, ok := strings.CutPrefix(e.Msg, undefinedPrefix); ok {
			if near := Nearest(name, names); near != "" {
				e.Msg = fmt.Sprintf("%s (did you mean %s?)", e.Msg, near)
			}
		}
		out[i] = e
	}
	return out
}
