package git

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/manifestsync/manifestsync/engine/source"
)

// Defaults for source.Limits, the same as source.Dir uses.
const (
	defaultMaxFiles = 10_000
	defaultMaxBytes = 256 << 20
)

func withDefaults(l source.Limits) source.Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = defaultMaxFiles
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = defaultMaxBytes
	}
	return l
}

// cleanPath checks the path of a source and returns it clean, "" for the
// repository root.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if path.IsAbs(p) {
		return "", fmt.Errorf("path %q must be relative to the repository root", p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("path %q leaves the repository", p)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// treeReader collects the files of a tree within limits.
type treeReader struct {
	st      storer.EncodedObjectStorer
	limits  source.Limits
	maxFile int64
	files   map[string][]byte
	total   int64
}

// readFiles returns the files of commit under dir, keyed relative to dir,
// and their size. Every file's size is checked, from its object's header,
// before it is read: one over maxFile, or one that takes the total over
// limits.MaxBytes, fails the snapshot with an error naming it.
func readFiles(st storer.EncodedObjectStorer, commit *object.Commit, dir string, limits source.Limits, maxFile int64) (map[string][]byte, int64, error) {
	tree, err := commit.Tree()
	if err != nil {
		return nil, 0, fmt.Errorf("commit %s: %w", commit.Hash, err)
	}
	if dir != "" {
		if tree, err = subtree(st, tree, dir); err != nil {
			return nil, 0, err
		}
	}
	r := &treeReader{st: st, limits: withDefaults(limits), maxFile: maxFile, files: map[string][]byte{}}
	if err := r.walk(tree, ""); err != nil {
		return nil, 0, err
	}
	return r.files, r.total, nil
}

func subtree(st storer.EncodedObjectStorer, tree *object.Tree, dir string) (*object.Tree, error) {
	e, err := tree.FindEntry(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: path %q is not in the commit", ErrPathNotFound, dir)
	}
	if e.Mode != filemode.Dir {
		return nil, fmt.Errorf("%w: path %q is not a directory", ErrPathNotFound, dir)
	}
	return object.GetTree(st, e.Hash)
}

// walk adds the regular files under tree, skipping hidden entries, symbolic
// links and submodules.
func (r *treeReader) walk(tree *object.Tree, prefix string) error {
	for _, e := range tree.Entries {
		if strings.HasPrefix(e.Name, ".") {
			continue
		}
		p := path.Join(prefix, e.Name)
		switch e.Mode {
		case filemode.Dir:
			sub, err := object.GetTree(r.st, e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if err := r.walk(sub, p); err != nil {
				return err
			}
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
			if err := r.add(p, e.Hash); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *treeReader) add(p string, h plumbing.Hash) error {
	if len(r.files) >= r.limits.MaxFiles {
		return fmt.Errorf("%w: more than %d files (the file-count limit)", ErrLimit, r.limits.MaxFiles)
	}
	blob, err := object.GetBlob(r.st, h)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if r.maxFile > 0 && blob.Size > r.maxFile {
		return fmt.Errorf("%w: file %s is %d bytes, over the limit of %d bytes a file", ErrLimit, p, blob.Size, r.maxFile)
	}
	r.total += blob.Size
	if r.total > r.limits.MaxBytes {
		return fmt.Errorf("%w: more than %d bytes (the size limit), at file %s", ErrLimit, r.limits.MaxBytes, p)
	}
	rd, err := blob.Reader()
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	r.files[p] = b
	return nil
}
