package httpsrc

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// Unzip reads a zip archive into files keyed by clean relative paths, by
// the rules oci.Unpack applies to a tar+gzip: directories are implied; an
// entry that is absolute or leaves the directory, a symbolic link (as the
// external attributes say), a device, FIFO, socket or other special file,
// an encrypted entry, or a path given twice is refused, naming the entry.
// The files are bounded by l's count and unpacked size: an entry's
// declared size is checked before it is opened, and its bytes are read
// within what is left, so a zip bomb lying about its sizes stops at the
// limit.
func Unzip(archive []byte, l Limits) (map[string][]byte, error) {
	l = l.withDefaults()
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	// ErrInsecurePath (GODEBUG zipinsecurepath=0) comes with a usable
	// reader; the entries are checked below, each by name.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("%w: not a zip archive: %w", ErrRefused, err)
	}
	files := map[string][]byte{}
	left := l.MaxUnpackedBytes
	for _, f := range zr.File {
		rel, err := entryPath(f.Name)
		if err != nil {
			return nil, err
		}
		mode := f.Mode()
		switch {
		case mode&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%w: archive entry %q: a symbolic link", ErrRefused, f.Name)
		case mode&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			return nil, fmt.Errorf("%w: archive entry %q: a device file", ErrRefused, f.Name)
		case mode.IsDir():
			continue
		case !mode.IsRegular():
			return nil, fmt.Errorf("%w: archive entry %q: not a regular file (mode %s)", ErrRefused, f.Name, mode)
		}
		if rel == "" {
			return nil, fmt.Errorf("%w: archive entry %q: a file without a name", ErrRefused, f.Name)
		}
		if f.Flags&0x1 != 0 {
			return nil, fmt.Errorf("%w: archive entry %q: encrypted", ErrRefused, f.Name)
		}
		if _, dup := files[rel]; dup {
			return nil, fmt.Errorf("%w: archive entry %q: given twice", ErrRefused, f.Name)
		}
		if len(files) >= l.MaxFiles {
			return nil, fmt.Errorf("%w: more than %d files", ErrLimit, l.MaxFiles)
		}
		if f.UncompressedSize64 > uint64(left) {
			return nil, fmt.Errorf("%w: unpacked files over %d bytes (at %q)", ErrLimit, l.MaxUnpackedBytes, f.Name)
		}
		data, err := readEntry(f, left)
		if err != nil {
			return nil, err
		}
		left -= int64(len(data))
		files[rel] = data
	}
	return files, nil
}

// readEntry reads f's bytes, at most left: more is the limit's error
// whatever the entry declared.
func readEntry(f *zip.File, left int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("archive entry %q: %w", f.Name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, left+1))
	if err != nil {
		return nil, fmt.Errorf("archive entry %q: %w", f.Name, err)
	}
	if int64(len(data)) > left {
		return nil, fmt.Errorf("%w: unpacked files over the limit (at %q)", ErrLimit, f.Name)
	}
	return data, nil
}

// entryPath returns an archive entry's clean relative path ("" for the top
// directory itself), refusing one that is absolute, a Windows path, or
// leaves the directory: oci's rule for tar entries.
func entryPath(name string) (string, error) {
	if strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: archive entry %q: an absolute or Windows path", ErrRefused, name)
	}
	if len(name) >= 2 && name[1] == ':' {
		return "", fmt.Errorf("%w: archive entry %q: an absolute or Windows path", ErrRefused, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: archive entry %q: leaves the archive's directory", ErrRefused, name)
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}
