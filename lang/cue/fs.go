package cue

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// mapFS is a read-only fs.FS over an in-memory file tree whose keys are
// slash-separated relative paths; directories are implied by the files.
type mapFS struct {
	files map[string][]byte
	dirs  map[string][]fs.DirEntry
}

func newMapFS(files map[string][]byte) (*mapFS, error) {
	m := &mapFS{files: make(map[string][]byte, len(files)), dirs: map[string][]fs.DirEntry{".": nil}}
	names := make([]string, 0, len(files))
	for name := range files {
		if !fs.ValidPath(name) || name == "." {
			return nil, fmt.Errorf("invalid file name %q", name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, isDir := m.dirs[name]; isDir {
			return nil, fmt.Errorf("%q is both a file and a directory", name)
		}
		m.files[name] = files[name]
		// Add the file to its directory, and each new directory to its parent.
		child := fs.DirEntry(fileInfo{name: path.Base(name), size: int64(len(files[name]))})
		for dir := path.Dir(name); ; dir = path.Dir(dir) {
			entries, seen := m.dirs[dir]
			m.dirs[dir] = append(entries, child)
			if seen || dir == "." {
				break
			}
			if _, isFile := m.files[dir]; isFile {
				return nil, fmt.Errorf("%q is both a file and a directory", dir)
			}
			child = fileInfo{name: path.Base(dir), dir: true}
		}
	}
	for _, entries := range m.dirs {
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	}
	return m, nil
}

func (m *mapFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if data, ok := m.files[name]; ok {
		return &openFile{fileInfo: fileInfo{name: path.Base(name), size: int64(len(data))}, Reader: bytes.NewReader(data)}, nil
	}
	if entries, ok := m.dirs[name]; ok {
		return &openDir{fileInfo: fileInfo{name: path.Base(name), dir: true}, entries: entries}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (m *mapFS) ReadFile(name string) ([]byte, error) {
	data, ok := m.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return bytes.Clone(data), nil
}

func (m *mapFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, ok := m.dirs[name]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return append([]fs.DirEntry(nil), entries...), nil
}

func (m *mapFS) Stat(name string) (fs.FileInfo, error) {
	if data, ok := m.files[name]; ok {
		return fileInfo{name: path.Base(name), size: int64(len(data))}, nil
	}
	if _, ok := m.dirs[name]; ok {
		return fileInfo{name: path.Base(name), dir: true}, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

// fileInfo is both the fs.FileInfo and the fs.DirEntry of a file or directory.
type fileInfo struct {
	name string
	size int64
	dir  bool
}

func (fi fileInfo) Name() string               { return fi.name }
func (fi fileInfo) Size() int64                { return fi.size }
func (fi fileInfo) ModTime() time.Time         { return time.Time{} }
func (fi fileInfo) IsDir() bool                { return fi.dir }
func (fi fileInfo) Sys() any                   { return nil }
func (fi fileInfo) Type() fs.FileMode          { return fi.Mode().Type() }
func (fi fileInfo) Info() (fs.FileInfo, error) { return fi, nil }
func (fi fileInfo) String() string             { return fs.FormatFileInfo(fi) }

func (fi fileInfo) Mode() fs.FileMode {
	if fi.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

type openFile struct {
	fileInfo
	*bytes.Reader
}

func (f *openFile) Stat() (fs.FileInfo, error) { return f.fileInfo, nil }
func (f *openFile) Close() error               { return nil }

type openDir struct {
	fileInfo
	entries []fs.DirEntry
	off     int
}

func (d *openDir) Stat() (fs.FileInfo, error) { return d.fileInfo, nil }
func (d *openDir) Close() error               { return nil }

func (d *openDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: fs.ErrInvalid}
}

func (d *openDir) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return append([]fs.DirEntry(nil), rest...), nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(rest))
	d.off += n
	return append([]fs.DirEntry(nil), rest[:n]...), nil
}

// cleanDir makes dir a clean slash-separated path relative to the root
// of a file tree, and rejects one that is absolute or leaves the tree.
func cleanDir(dir string) (string, error) {
	if dir == "" {
		return ".", nil
	}
	d := path.Clean(dir)
	if path.IsAbs(d) || d == ".." || strings.HasPrefix(d, "../") {
		return "", fmt.Errorf("directory %q is outside the file tree", dir)
	}
	return d, nil
}
