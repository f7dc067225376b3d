package main

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
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the engine runs as, as distroless's nonroot.
const (
	nonrootUID  = 65532
	nonrootName = "nonroot"
	nonrootHome = "/home/nonroot"
)

// entry is one file, directory or symlink of a layer. Paths are relative
// to the root ("etc/passwd"); owners are numeric, with no names.
type entry struct {
	Name     string
	Mode     int64 // permission bits with the sticky bit as tar has it (0o1777)
	Dir      bool
	UID, GID int
	Data     []byte
}

// tarLayer writes entries as a tar stream whose bytes depend only on its
// input: entries sorted by path, every parent directory present, one
// modification time, no user or group names, no access or change times.
func tarLayer(entries []entry, mtime time.Time) ([]byte, error) {
	byName := map[string]entry{}
	for _, e := range entries {
		name := path.Clean(strings.TrimPrefix(e.Name, "/"))
		if name == "." || strings.HasPrefix(name, "../") || name == ".." {
			return nil, fmt.Errorf("layer entry %q: not a path under /", e.Name)
		}
		if _, dup := byName[name]; dup {
			return nil, fmt.Errorf("layer entry %q: given twice", e.Name)
		}
		e.Name = name
		byName[name] = e
	}
	given := make([]string, 0, len(byName))
	for name := range byName {
		given = append(given, name)
	}
	for _, name := range given {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			parent, ok := byName[dir]
			if !ok {
				byName[dir] = entry{Name: dir, Dir: true, Mode: 0o755}
			} else if !parent.Dir {
				return nil, fmt.Errorf("layer entry %q: parent %q is not a directory", name, dir)
			}
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, name := range names {
		e := byName[name]
		h := &tar.Header{
			Name:    name,
			Mode:    e.Mode,
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: mtime,
		}
		if e.Dir {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %q: %w", name, err)
		}
		if !e.Dir {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, fmt.Errorf("layer entry %q: %w", name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipLayer compresses a tar stream into an OCI layer. The gzip header
// carries no name and no time, so the digest depends on the tar alone.
func gzipLayer(tarStream []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarStream); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Base is what the image holds besides the engine: files read from this
// machine once, so that assembling twice reads them the same.
type Base struct {
	CACerts   []byte // Debian's /etc/ssl/certs/ca-certificates.crt
	CALicense []byte // ca-certificates' copyright file, when installed
}

// loadBase reads the CA bundle (and its package's copyright notice, which
// Debian installs beside the package's documentation unless the machine
// drops docs).
func loadBase(caBundle string) (Base, error) {
	var b Base
	var err error
	if b.CACerts, err = os.ReadFile(caBundle); err != nil {
		return b, fmt.Errorf("CA bundle (install Debian's ca-certificates): %w", err)
	}
	if len(b.CACerts) == 0 {
		return b, fmt.Errorf("CA bundle %s: empty", caBundle)
	}
	b.CALicense, err = os.ReadFile("/usr/share/doc/ca-certificates/copyright")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	return b, nil
}

// baseEntries are the files every platform shares: the users, the CA
// bundle, a writable /tmp and the nonroot user's home.
func baseEntries(b Base) []entry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n",
		nonrootName, nonrootUID, nonrootUID, nonrootName, nonrootHome)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", nonrootName, nonrootUID)
	es := []entry{
		{Name: "etc/passwd", Mode: 0o644, Data: []byte(passwd)},
		{Name: "etc/group", Mode: 0o644, Data: []byte(group)},
		{Name: "etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Name: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: b.CACerts},
		{Name: "root", Dir: true, Mode: 0o700},
		{Name: "home", Dir: true, Mode: 0o755},
		{Name: strings.TrimPrefix(nonrootHome, "/"), Dir: true, Mode: 0o700, UID: nonrootUID, GID: nonrootUID},
		{Name: "tmp", Dir: true, Mode: 0o1777},
	}
	if b.CALicense != nil {
		es = append(es, entry{Name: "usr/share/doc/ca-certificates/copyright", Mode: 0o644, Data: b.CALicense})
	}
	return es
}
