package stdlib

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/pmezard/go-difflib/difflib"
	"go.starlark.net/starlark"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// Golden is a golden file: what assert.golden compares a value with, or,
// under `engine test --update`, what it asks to write.
type Golden struct {
	// Source and Path name the file: a source and a clean, slash-separated
	// path in it.
	Source string `json:"source"`
	Path   string `json:"path"`
	// Data is the file's new content.
	Data []byte `json:"data"`
}

// Goldens collects the golden files assert.golden would write; it is
// safe for concurrent use.
type Goldens struct {
	mu    sync.Mutex
	files map[[2]string][]byte
}

type goldensKey struct{}

// WithGoldenUpdates returns a context under which assert.golden records
// what it is given into g instead of comparing it with the file (what
// `engine test --update` does; the caller writes g's files).
func WithGoldenUpdates(ctx context.Context, g *Goldens) context.Context {
	return context.WithValue(ctx, goldensKey{}, g)
}

func (g *Goldens) add(source, path string, data []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.files == nil {
		g.files = map[[2]string][]byte{}
	}
	g.files[[2]string{source, path}] = data
}

// Files returns the recorded files, by source and path; a file given twice
// holds what it was given last.
func (g *Goldens) Files() []Golden {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Golden, 0, len(g.files))
	for k, data := range g.files {
		out = append(out, Golden{Source: k[0], Path: k[1], Data: data})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Source != out[j].Source {
			return out[i].Source < out[j].Source
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// assertGolden is assert.golden(got, path, msg=None): a snapshot test.
func assertGolden(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var got, msg starlark.Value
	var path string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "got", &got, "path", &path, "msg?", &msg); err != nil {
		return nil, err
	}
	text, ok := starlark.AsString(got)
	if !ok {
		var err error
		if text, err = encodeYAML(got); err != nil {
			return nil, err
		}
	}
	ctx := lstar.ContextOf(thread)
	files, source, clean, err := lstar.ResolvePath(thread, path)
	if err != nil {
		return nil, err
	}
	if g, ok := ctx.Value(goldensKey{}).(*Goldens); ok && g != nil {
		g.add(source, clean, []byte(text))
		return starlark.None, nil
	}
	name := lstar.DisplayName(ctx, source, clean)
	want, err := files.ReadFile(source, clean)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, failure(msg, "%s: no such golden file (engine test --update writes it)", name)
	} else if err != nil {
		return nil, err
	}
	if bytes.Equal(want, []byte(text)) {
		return starlark.None, nil
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(strings.TrimSuffix(string(want), "\n")), B: difflib.SplitLines(strings.TrimSuffix(text, "\n")),
		FromFile: name, ToFile: "got", Context: 2,
	})
	if err != nil {
		return nil, err
	}
	return nil, failure(msg, "got differs from %s (engine test --update rewrites it):\n%s", name, strings.TrimRight(diff, "\n"))
}
