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
