package source

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Every local file an evaluation reads is read through os.Root, from the
// directory tree it was given: a symbolic link is followed while it stays
// inside the tree, and one that leads out of it (kc.yaml ->
// ~/.kube/config) is an error, so that a repository cannot make a CI run
// read, and print, a file of the machine it runs on.

// ReadFile reads name, a slash- or OS-separated path inside dir, without
// leaving dir.
func ReadFile(dir, name string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return readIn(root, dir, name)
}

// Stat returns what name, a path inside dir, resolves to, without leaving
// dir.
func Stat(dir, name string) (fs.FileInfo, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	info, err := root.Stat(name)
	if err != nil {
		return nil, escapeError(dir, name, err)
	}
	return info, nil
}

// readIn reads name inside root, whose path is dir: a regular file only
// (see readRegularIn).
func readIn(root *os.Root, dir, name string) ([]byte, error) {
	return readRegularIn(root, dir, name)
}

// SymlinkError is a file whose path leads out of the tree it is read from
// through a symbolic link.
type SymlinkError struct {
	Path string // the file, as dir/name
	Dir  string // the tree
}

func (e *SymlinkError) Error() string {
	return fmt.Sprintf("%s: symlink resolves outside %s", e.Path, e.Dir)
}

// escapeError words an os.Root error: a path that leaves the tree is a
// *SymlinkError, anything else is returned as it is. os.Root keeps its
// "path escapes" error unexported, so the path is resolved again to tell.
func escapeError(dir, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	p := filepath.Join(dir, name)
	resolved, rerr := filepath.EvalSymlinks(p)
	base, berr := filepath.EvalSymlinks(dir)
	switch {
	case rerr == nil && berr == nil && !inside(base, resolved):
		return &SymlinkError{Path: p, Dir: dir}
	case rerr != nil:
		// A link to nowhere outside the tree.
		if info, lerr := os.Lstat(p); lerr == nil && info.Mode()&fs.ModeSymlink != 0 {
			return &SymlinkError{Path: p, Dir: dir}
		}
	}
	return err
}

// inside reports whether p is dir or under it; both are clean and resolved.
func inside(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
