package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"time"
)

// Snapshot is the content of one source at one revision: a tree of files, or
// for object sources the one object.
type Snapshot struct {
	// Revision identifies the content: "main@sha1:<hash>" for Git,
	// "resourceVersion:<n>" for cluster objects, "sha256:<hex>" otherwise.
	Revision string
	// Files maps clean, slash-separated relative paths to contents.
	Files map[string][]byte
	// Root is, for a git source whose path holds a kustomization (and
	// whose kustomize is not false), the whole repository tree at the
	// same commit, keyed from the repository root (for an oci or http
	// source with a path, the whole artifact or archive): kustomize builds the
	// path in it, as Flux and Argo CD build a path of a whole checkout,
	// so an overlay may name ../../base. It is read within the source's
	// limits and shared with Files and the git cache (never modified).
	// Nothing but the build reads it: load(), file reads and the source's
	// digest see Files (the revision, a commit, covers both). Nil
	// otherwise.
	Root map[string][]byte
	// Object is set for object sources.
	Object map[string]any
	// Objects is set for object set sources : the
	// objects, ordered by namespace, name, group and kind.
	Objects []map[string]any
	// Refs are the ConfigMaps and Secrets the source's substituteFrom and
	// helm valuesFrom name, read with it ("ConfigMap/NAME" or
	// "Secret/NAME" to the object's data, a Secret's values decoded); an
	// optional one that is missing is absent. They are inputs like the
	// files: part of the source's digest, and a Secret's values are
	// redacted wherever they would show.
	Refs map[string]map[string]string
	// Decrypted are the values decrypted from the snapshot's SOPS files
	// (spec.decryption): Secret values, masked wherever they would show.
	// Files then hold the decrypted content; Revision stays that of the
	// files as read, encrypted.
	Decrypted []string
	// Time is when the revision was made (a Git commit's time); scripts
	// see it as time.now(). Zero when unknown.
	Time time.Time
	// Origin is the local directory the files were read from, if any;
	// messages then name files by their local path.
	Origin string
	// Pending, when set, says that this is the last snapshot of its source
	// served while a newer fetch goes on (a git server slower than the
	// caller waits for), and is closed when that fetch ends: ask again
	// then. Never serialized.
	Pending <-chan struct{} `json:"-"`
}

// FileName names a file of the snapshot of source name in messages: its
// local path when the snapshot came from a directory, else "source/path".
func (s *Snapshot) FileName(name, p string) string {
	if s != nil && s.Origin != "" {
		return path.Join(filepath.ToSlash(s.Origin), p)
	}
	return name + "/" + p
}

func fileName(snaps map[string]*Snapshot, name, p string) string {
	return snaps[name].FileName(name, p)
}

// ReadFile returns the file at path, or an error wrapping fs.ErrNotExist.
func (s *Snapshot) ReadFile(name string) ([]byte, error) {
	if b, ok := s.Files[name]; ok {
		return b, nil
	}
	return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
}

// Paths returns the file paths in sorted order.
func (s *Snapshot) Paths() []string {
	paths := make([]string, 0, len(s.Files))
	for p := range s.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// Glob returns the sorted paths that match pattern. A pattern is a
// path.Match pattern in which "**" matches any number of directories; the
// empty pattern matches everything.
func (s *Snapshot) Glob(pattern string) ([]string, error) {
	if pattern == "" {
		pattern = "**"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, fmt.Errorf("glob %q: %w", pattern, err)
	}
	var out []string
	for _, p := range s.Paths() {
		if globMatch(pattern, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Sub returns the snapshot of the subtree dir, with paths relative to it.
func (s *Snapshot) Sub(dir string) (*Snapshot, error) {
	dir = path.Clean(dir)
	if dir == "." || dir == "" {
		return s, nil
	}
	sub := &Snapshot{Revision: s.Revision, Time: s.Time, Files: map[string][]byte{}, Decrypted: s.Decrypted}
	if s.Origin != "" {
		sub.Origin = path.Join(s.Origin, dir)
	}
	prefix := dir + "/"
	for p, b := range s.Files {
		if len(p) > len(prefix) && p[:len(prefix)] == prefix {
			sub.Files[p[len(prefix):]] = b
		}
	}
	if len(sub.Files) == 0 {
		return nil, fmt.Errorf("path %q: no files there", dir)
	}
	return sub, nil
}

// ContentDigest returns "sha256:<hex>" over the paths and contents of files,
// for sources that carry no revision of their own.
func ContentDigest(files map[string][]byte) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(files[p]))
		h.Write(files[p])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// globMatch reports whether name matches pattern, where a "**" element
// matches zero or more path elements and other elements follow path.Match.
func globMatch(pattern, name string) bool {
	return matchElems(splitPath(pattern), splitPath(name))
}

func matchElems(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchElems(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}
