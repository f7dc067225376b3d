package git

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
)

// Commit is one commit of a repository on disk, read from the object
// store alone: its working tree, index and checkout are never touched, so
// that a command can compare the files of a revision with those of the
// working tree. Paths are slash-separated and relative to the
// repository's root; as in snapshots, symbolic links and submodules are
// not files.
type Commit struct {
	// Root is the working tree's directory.
	Root string
	// Hash is the commit's full hash.
	Hash string
	repo *git.Repository
	tree *object.Tree
	time object.Signature
}

// OpenCommit opens the repository that holds dir (it or a parent has the
// .git) and resolves rev in it: a branch, a tag, a hash or an expression
// git rev-parse takes (HEAD~1, main^2).
func OpenCommit(dir, rev string) (*Commit, error) {
	repo, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	root := wt.Filesystem.Root()
	h, err := repo.ResolveRevision(plumbing.Revision(rev))
	if err != nil {
		return nil, fmt.Errorf("%w: revision %q in %s: %w", ErrRefNotFound, rev, root, err)
	}
	c, err := repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("revision %q (%s) in %s: %w", rev, h, root, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("revision %q (%s) in %s: %w", rev, h, root, err)
	}
	return &Commit{Root: root, Hash: c.Hash.String(), repo: repo, tree: tree, time: c.Committer}, nil
}

// entry returns the tree entry at p, or an error wrapping fs.ErrNotExist.
func (c *Commit) entry(p string) (*object.TreeEntry, error) {
	p, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	if p == "" {
		return &object.TreeEntry{Mode: filemode.Dir, Hash: c.tree.Hash}, nil
	}
	e, err := c.tree.FindEntry(p)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	return e, nil
}

// IsDir tells a directory of the commit from a file; an error wraps
// fs.ErrNotExist when p is neither (a symbolic link and a submodule are
// neither).
func (c *Commit) IsDir(p string) (bool, error) {
	e, err := c.entry(p)
	if err != nil {
		return false, err
	}
	switch e.Mode {
	case filemode.Dir:
		return true, nil
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		return false, nil
	}
	return false, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
}

// ReadFile returns the content of the file p.
func (c *Commit) ReadFile(p string) ([]byte, error) {
	dir, err := c.IsDir(p)
	if err != nil {
		return nil, err
	}
	if dir {
		return nil, fmt.Errorf("%s: is a directory", p)
	}
	e, _ := c.entry(p)
	blob, err := c.repo.BlobObject(e.Hash)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	r, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer r.Close()
	return io.ReadAll(r)
}

// Files lists the files under the directory dir, sorted, as paths from
// the root; hidden files and directories are left out, as in snapshots.
func (c *Commit) Files(dir string) ([]string, error) {
	files, err := c.dirFiles(dir, source.Limits{})
	if err != nil {
		return nil, err
	}
	d, _ := cleanPath(dir)
	out := make([]string, 0, len(files))
	for p := range files {
		out = append(out, path.Join(d, p))
	}
	slices.Sort(out)
	return out, nil
}

// Dir returns the snapshot of the directory dir, as source.Dir reads a
// directory of the working tree: its revision is the digest of its
// content, so that the same files make the same revision on either side.
// Origin is origin: what messages name its files by.
func (c *Commit) Dir(dir, origin string, limits source.Limits) (*engine.Snapshot, error) {
	files, err := c.dirFiles(dir, limits)
	if err != nil {
		return nil, err
	}
	return &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files), Time: c.time.When.UTC(), Origin: origin}, nil
}

func (c *Commit) dirFiles(dir string, limits source.Limits) (map[string][]byte, error) {
	isDir, err := c.IsDir(dir)
	if err != nil {
		return nil, err
	}
	if !isDir {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	e, _ := c.entry(dir)
	tree, err := c.repo.TreeObject(e.Hash)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	r := &treeReader{st: c.repo.Storer, limits: withDefaults(limits), files: map[string][]byte{}}
	if err := r.walk(tree, ""); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return r.files, nil
}

// Rel returns the path of p, a path of the file system (absolute, or
// relative to the current directory), from the repository's root; an
// error when p is outside the repository.
func (c *Commit) Rel(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(realPath(c.Root), realPath(abs))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s: %w", p, ErrOutside)
	}
	return filepath.ToSlash(rel), nil
}

// ErrOutside is a path outside the repository a Commit reads.
var ErrOutside = errors.New("outside the repository")

// realPath resolves the symbolic links of p's longest existing prefix, so
// that a path of a file deleted from the working tree compares with the
// root as one that exists.
func realPath(p string) string {
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest)
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
