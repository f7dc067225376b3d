package starlark

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

type filesKey struct{}

type filesValue struct {
	files  Files
	source string
}

// WithFiles returns a context that carries the source snapshots and the
// name of the script's own source, for built-ins that read snapshots (such
// as kustomize.build or cue.validate) through ContextOf(thread).
func WithFiles(ctx context.Context, files Files, source string) context.Context {
	return context.WithValue(ctx, filesKey{}, filesValue{files, source})
}

// FilesFrom returns what WithFiles put in ctx; files is nil when nothing was.
func FilesFrom(ctx context.Context) (files Files, source string) {
	v, _ := ctx.Value(filesKey{}).(filesValue)
	return v.files, v.source
}

// ResolvePath resolves a file or directory path a built-in was given:
// "@name//dir" is dir in source name, "//dir" and "dir" are relative to the
// root of the script's own source, and "." or "" is that root. Paths that
// escape their source are errors.
func ResolvePath(ctx context.Context, p string) (files Files, source, clean string, err error) {
	files, source = FilesFrom(ctx)
	if files == nil {
		return nil, "", "", errors.New("no source snapshots in this evaluation")
	}
	if rest, ok := strings.CutPrefix(p, "@"); ok {
		name, sub, ok := strings.Cut(rest, "//")
		if !ok || name == "" {
			return nil, "", "", fmt.Errorf("path %q: want \"@source//path\"", p)
		}
		source, p = name, sub
	} else {
		p = strings.TrimPrefix(p, "//")
	}
	if source == "" {
		return nil, "", "", fmt.Errorf("path %q: no source (use \"@source//path\")", p)
	}
	if p == "" || path.Clean(p) == "." {
		return files, source, ".", nil
	}
	clean, err = cleanPath(p)
	if err != nil {
		return nil, "", "", fmt.Errorf("path %q: %w %q", p, err, source)
	}
	return files, source, clean, nil
}

// Trees is implemented by Files that can hand out a source's whole tree,
// which built-ins that read directories (cue.validate of a package,
// kustomize.build) need.
type Trees interface {
	// Tree returns the files of a source by clean relative path; the map
	// is shared and must not be modified. A missing source returns an
	// error wrapping fs.ErrNotExist.
	Tree(source string) (map[string][]byte, error)
}

// ResolveTree is ResolvePath for built-ins that read a directory: it
// returns the whole tree of the source the path is in, and the clean path.
func ResolveTree(ctx context.Context, p string) (tree map[string][]byte, source, clean string, err error) {
	files, source, clean, err := ResolvePath(ctx, p)
	if err != nil {
		return nil, "", "", err
	}
	trees, ok := files.(Trees)
	if !ok {
		return nil, "", "", errors.New("the source snapshots of this evaluation cannot be listed")
	}
	if tree, err = trees.Tree(source); err != nil {
		return nil, "", "", fmt.Errorf("path %q: %w", p, err)
	}
	return tree, source, clean, nil
}

// DisplayName names path p of source in messages: through the FileName
// method of the context's Files when it has one (the engine names files of
// local directories by their local path), else "source/p".
func DisplayName(ctx context.Context, source, p string) string {
	files, _ := FilesFrom(ctx)
	if n, ok := files.(interface{ FileName(source, p string) string }); ok {
		return n.FileName(source, p)
	}
	return source + "/" + p
}
