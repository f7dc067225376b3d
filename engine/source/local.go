package source

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/manifestsync/manifestsync/engine"
)

// Limits bound what a source may hold, so that a mistaken path (a home
// directory, a huge repository) fails fast instead of exhausting memory.
type Limits struct {
	MaxFiles int   // default 10,000
	MaxBytes int64 // default 256 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = 10_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 256 << 20
	}
	return l
}

// Dir reads a local directory into a snapshot whose revision is a digest
// of its content. Hidden files and directories (".git") are skipped. A
// symbolic link to a file inside the directory is read as that file; one
// that leads out of it is an error (see ReadFile); links to directories
// are not followed. A file that is neither regular nor a directory (a
// FIFO, a socket, a device), or a link to one, is a *NotRegularError.
func Dir(dir string, limits Limits) (*engine.Snapshot, error) {
	limits = limits.withDefaults()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	defer root.Close()
	snap := &engine.Snapshot{Files: map[string][]byte{}}
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		var size int64
		switch {
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			size = info.Size()
		case d.Type()&fs.ModeSymlink != 0:
			info, err := root.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a dangling link inside the tree
			}
			if err != nil {
				return escapeError(dir, filepath.FromSlash(p), err)
			}
			if info.IsDir() {
				return nil // links to directories are not followed
			}
			if !info.Mode().IsRegular() {
				return &NotRegularError{Path: filepath.Join(dir, filepath.FromSlash(p)), Mode: info.Mode()}
			}
			size = info.Size()
		case d.IsDir():
			return nil
		default:
			// A FIFO would block the read until a writer came; a
			// device or socket is no source file either.
			return &NotRegularError{Path: filepath.Join(dir, filepath.FromSlash(p)), Mode: d.Type()}
		}
		total += size
		if len(snap.Files) >= limits.MaxFiles {
			return fmt.Errorf("more than %d files", limits.MaxFiles)
		}
		if total > limits.MaxBytes {
			return fmt.Errorf("more than %d bytes", limits.MaxBytes)
		}
		b, err := readIn(root, dir, filepath.FromSlash(p))
		if err != nil {
			return err
		}
		snap.Files[p] = b
		return nil
	})
	if err != nil {
		var (
			se *SymlinkError
			ne *NotRegularError
		)
		if errors.As(err, &se) || errors.As(err, &ne) {
			return nil, err
		}
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	snap.Revision = engine.ContentDigest(snap.Files)
	snap.Origin = dir
	return snap, nil
}

// ObjectFile reads one Kubernetes object from a YAML or JSON file, as the
// CLI's stand-in for an object in a cluster. The file is read inside its
// own directory: a symbolic link out of it is an error. The snapshot's
// revision is the object's resourceVersion when it has one, else a digest
// of its content.
func ObjectFile(name string) (*engine.Snapshot, error) {
	return ObjectFileIn(filepath.Dir(name), filepath.Base(name))
}

// ObjectFileIn is ObjectFile for the file name inside the tree dir.
func ObjectFileIn(dir, name string) (*engine.Snapshot, error) {
	b, err := ReadFile(dir, name)
	if err != nil {
		return nil, err
	}
	return ObjectBytes(filepath.Join(dir, name), b)
}

// ObjectBytes is ObjectFile for the content b of the file name.
func ObjectBytes(name string, b []byte) (*engine.Snapshot, error) {
	docs, err := engine.DecodeDocuments(b)
	if err != nil {
		return nil, engine.FileError(name, err)
	}
	var objs []map[string]any
	for _, d := range docs {
		if m, ok := d.Value.(map[string]any); ok && m["apiVersion"] != nil && m["kind"] != nil {
			objs = append(objs, m)
		}
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: holds %d objects, want exactly one", name, len(objs))
	}
	return ObjectSnapshot(objs[0]), nil
}

// ObjectSnapshot makes the snapshot of an object source.
func ObjectSnapshot(obj map[string]any) *engine.Snapshot {
	snap := &engine.Snapshot{Object: obj}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"].(string); ok && rv != "" {
			snap.Revision = "resourceVersion:" + rv
		}
	}
	if snap.Revision == "" {
		snap.Revision = engine.ObjectDigest(obj)
	}
	return snap
}

// NotRegularError is a file that is read as the user's input but is not
// a regular file: a FIFO (whose open and read block until a writer
// comes), a socket, or a device (/dev/zero never ends). None is read.
type NotRegularError struct {
	Path string // as given, or dir/name in a tree
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, fileKind(e.Mode))
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	default:
		return "irregular file"
	}
}

// ReadRegularFile reads name, a path the user gave (a sync file, a
// values or namespaces file), refusing, with a *NotRegularError, anything
// but a regular file, without blocking on it: the file is checked before
// it is opened, opened non-blocking (a FIFO put in its place in between
// does not block the open) and checked again once open.
func ReadRegularFile(name string) ([]byte, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &NotRegularError{Path: name, Mode: info.Mode()}
	}
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	return readRegular(f, name)
}

// readRegularIn is ReadRegularFile for name inside root, whose path is
// dir: nothing resolves outside it (see escapeError).
func readRegularIn(root *os.Root, dir, name string) ([]byte, error) {
	p := filepath.Join(dir, name)
	info, err := root.Stat(name)
	if err != nil {
		return nil, escapeError(dir, name, err)
	}
	if !info.Mode().IsRegular() {
		return nil, &NotRegularError{Path: p, Mode: info.Mode()}
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, escapeError(dir, name, err)
	}
	return readRegular(f, p)
}

// readRegular reads the open file f, shown as p, if it is a regular file,
// and closes it.
func readRegular(f *os.File, p string) ([]byte, error) {
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, &NotRegularError{Path: p, Mode: info.Mode()}
	}
	return io.ReadAll(f)
}

// WriteFileIn writes data to name, a slash- or OS-separated path inside
// dir, without leaving dir, making the directories it needs: a checkout
// that holds a symbolic link out of dir where a file is written (an
// --out-dir, a golden file) cannot make the CLI overwrite a file of the
// machine (a *SymlinkError), and one that holds a FIFO there cannot make
// the write block (the file is opened non-blocking: a FIFO nobody reads
// fails at once) nor be written to a device (*NotRegularError).
func WriteFileIn(dir, name string, data []byte, perm fs.FileMode) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	p := filepath.Join(dir, name)
	if parent := filepath.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o755); err != nil {
			return escapeError(dir, name, err)
		}
	}
	if info, err := root.Stat(name); err == nil && !info.Mode().IsRegular() {
		return &NotRegularError{Path: p, Mode: info.Mode()}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, perm)
	if err != nil {
		if info, serr := root.Stat(name); serr == nil && !info.Mode().IsRegular() {
			return &NotRegularError{Path: p, Mode: info.Mode()} // a FIFO nobody reads
		}
		return escapeError(dir, name, err)
	}
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return err
		}
		return &NotRegularError{Path: p, Mode: info.Mode()}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
