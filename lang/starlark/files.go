package starlark

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"go.starlark.net/starlark"
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

// ResolvePath resolves a file or directory path given to the built-in
// running on thread as load() resolves a module: "@name//p" is p in source
// name, "//p" is p from the root of the calling file's source, and any
// other p (or "." or "") is relative to the calling file's directory. The
// calling file is the one that holds the code that called the built-in, so
// that a test in app/ validating against "schemas" reads app/schemas, as
// its load("lib.star") reads app/lib.star. On a thread this package did not
// start the calling file is not known, and p is relative to the root of
// the script's source. Paths that escape their source are errors: nothing
// outside the snapshots can be read.
func ResolvePath(thread *starlark.Thread, p string) (files Files, source, clean string, err error) {
	files, source = FilesFrom(ContextOf(thread))
	if files == nil {
		return nil, "", "", errors.New("no source snapshots in this evaluation")
	}
	cur, ok := caller(thread)
	if !ok {
		cur = executing{key: fileKey{source: source}, dir: "."}
	}
	source, joined, ok := joinFrom(cur, p)
	if !ok {
		return nil, "", "", fmt.Errorf("path %q: want \"@source//path\"", p)
	}
	if source == "" {
		return nil, "", "", fmt.Errorf("path %q: no source (use \"@source//path\")", p)
	}
	if !strings.HasPrefix(joined, "/") && path.Clean(joined) == "." {
		return files, source, ".", nil
	}
	clean, err = cleanPath(joined)
	if err != nil {
		return nil, "", "", fmt.Errorf("path %q: %w %q", p, err, source)
	}
	return files, source, clean, nil
}

// threadCallersKey is the thread-local key of the files of the evaluation
// running on a thread, by their names in positions (a callers).
const threadCallersKey = "manifestsync.dev/callers"

// callers maps the name a file has in positions to the file, for finding
// the file a built-in was called from.
type callers map[string]executing

// caller is the file of the innermost Starlark function on thread's call
// stack: the code that called the running built-in (directly, or through
// built-ins such as assert.fails that call back into Starlark).
func caller(thread *starlark.Thread) (executing, bool) {
	byName, _ := thread.Local(threadCallersKey).(callers)
	if byName == nil {
		return executing{}, false
	}
	for i := range thread.CallStackDepth() {
		if fn, ok := thread.DebugFrame(i).Callable().(*starlark.Function); ok {
			cur, ok := byName[fn.Position().Filename()]
			return cur, ok
		}
	}
	return executing{}, false
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
func ResolveTree(thread *starlark.Thread, p string) (tree map[string][]byte, source, clean string, err error) {
	files, source, clean, err := ResolvePath(thread, p)
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
