package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// Unpack reads a gzipped tar into files keyed by clean relative paths,
// within the limits' file count and unpacked size. Directories are
// implied; an entry that is absolute or leaves the directory, a link
// (symbolic or hard), a device, FIFO or other special file, or a path
// given twice is refused, naming the entry.
func Unpack(tgz []byte, limits Limits) (map[string][]byte, error) {
	l := limits.withDefaults()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("%w: not a gzipped archive: %w", ErrRefused, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	left := l.MaxUnpackedBytes
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
		rel, err := entryPath(hd.Name)
		if err != nil {
			return nil, err
		}
		switch hd.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			return nil, fmt.Errorf("%w: archive entry %q: a link (to %q)", ErrRefused, hd.Name, hd.Linkname)
		case tar.TypeChar, tar.TypeBlock:
			return nil, fmt.Errorf("%w: archive entry %q: a device file", ErrRefused, hd.Name)
		default:
			return nil, fmt.Errorf("%w: archive entry %q: not a regular file (type %q)", ErrRefused, hd.Name, hd.Typeflag)
		}
		if rel == "" {
			return nil, fmt.Errorf("%w: archive entry %q: a file without a name", ErrRefused, hd.Name)
		}
		if _, dup := files[rel]; dup {
			return nil, fmt.Errorf("%w: archive entry %q: given twice", ErrRefused, hd.Name)
		}
		if len(files) >= l.MaxFiles {
			return nil, fmt.Errorf("%w: more than %d files", ErrLimit, l.MaxFiles)
		}
		if hd.Size > left {
			return nil, fmt.Errorf("%w: unpacked files over %d bytes (at %q)", ErrLimit, l.MaxUnpackedBytes, hd.Name)
		}
		data, err := io.ReadAll(io.LimitReader(tr, left+1))
		if err != nil {
			return nil, fmt.Errorf("archive entry %q: %w", hd.Name, err)
		}
		if int64(len(data)) > left {
			return nil, fmt.Errorf("%w: unpacked files over %d bytes (at %q)", ErrLimit, l.MaxUnpackedBytes, hd.Name)
		}
		left -= int64(len(data))
		files[rel] = data
	}
	return files, nil
}

// entryPath returns an archive entry's clean relative path ("" for the
// top directory itself), refusing one that would leave the directory.
func entryPath(name string) (string, error) {
	if strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: archive entry %q: an absolute or Windows path", ErrRefused, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: archive entry %q: leaves the artifact's directory", ErrRefused, name)
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

// Pack writes files as Flux's content layer: a gzipped tar of regular
// files (mode 0644, or 0755 for names in exec), sorted by path, with zero
// times and no owners, so the same files give the same bytes.
func Pack(files map[string][]byte, exec map[string]bool) ([]byte, error) {
	names := make([]string, 0, len(files))
	for name := range files {
		if p, err := entryPath(name); err != nil || p != name || p == "" {
			return nil, fmt.Errorf("%w: file %q: not a clean relative path", ErrRefused, name)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf) // no name, zero time: deterministic
	tw := tar.NewWriter(zw)
	for _, name := range names {
		mode := int64(0o644)
		if exec[name] {
			mode = 0o755
		}
		hd := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(files[name])), Mode: mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hd); err != nil {
			return nil, fmt.Errorf("archive entry %q: %w", name, err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			return nil, fmt.Errorf("archive entry %q: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ignoredAlways are left out of every directory pushed, as Flux leaves a
// checkout's VCS metadata out.
var ignoredAlways = []string{".git/", ".sourceignore"}

// Dir is a directory read for Push.
type Dir struct {
	Files map[string][]byte
	// Exec names the files with an executable bit.
	Exec map[string]bool
}

// ReadDir reads the regular files under dir, within limits' file count
// and size, leaving out .git/ and what a .sourceignore at dir's root
// (gitignore syntax, as Flux reads it) names. A symbolic link or special
// file is refused, naming it: what is pushed is what the directory holds.
func ReadDir(dir string, limits Limits) (*Dir, error) {
	l := limits.withDefaults()
	patterns := make([]gitignore.Pattern, 0, len(ignoredAlways))
	for _, p := range ignoredAlways {
		patterns = append(patterns, gitignore.ParsePattern(p, nil))
	}
	if b, err := os.ReadFile(filepath.Join(dir, ".sourceignore")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimRight(line, "\r")
			if line != "" && !strings.HasPrefix(line, "#") {
				patterns = append(patterns, gitignore.ParsePattern(line, nil))
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf(".sourceignore: %w", err)
	}
	ignore := gitignore.NewMatcher(patterns)
	d := &Dir{Files: map[string][]byte{}, Exec: map[string]bool{}}
	left := l.MaxUnpackedBytes
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.Match(strings.Split(rel, "/"), e.IsDir()) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%w: %s: not a regular file (a link or special file)", ErrRefused, rel)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if len(d.Files) >= l.MaxFiles {
			return fmt.Errorf("%w: more than %d files", ErrLimit, l.MaxFiles)
		}
		if info.Size() > left {
			return fmt.Errorf("%w: files over %d bytes (at %s)", ErrLimit, l.MaxUnpackedBytes, rel)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		left -= int64(len(b))
		d.Files[rel] = b
		if info.Mode()&0o111 != 0 {
			d.Exec[rel] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", dir, err)
	}
	return d, nil
}
