package starlark

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"go.starlark.net/starlark"
)

// Files is what load() can read: the source snapshots, by source name.
// Scripts reach nothing else.
type Files interface {
	// ReadFile returns the file at a clean, slash-separated, relative path of a source.
	// A missing source or file returns an error wrapping fs.ErrNotExist.
	ReadFile(source, path string) ([]byte, error)
}

// Script names the entry file: a path inside a source, or inline text.
type Script struct {
	Source string // source name; load() paths without @name// resolve here
	Path   string // path inside Source; for inline scripts a display name such as "<inline>"
	Inline []byte // when non-nil, the script text (Path is only its name)
}

// inlineName is the display name of an inline script without a Path.
const inlineName = "<inline>"

// scriptName is the script's file name in positions: the source file's
// name, or the inline script's display name.
func (in *Interpreter) scriptName(s Script) string {
	if s.Inline != nil {
		if s.Path == "" {
			return inlineName
		}
		return s.Path
	}
	return in.filename(fileKey{s.Source, s.Path})
}

// filename is a file's name in positions and errors: Options.FileName's,
// or "source/path".
func (in *Interpreter) filename(k fileKey) string {
	if in.fileName != nil {
		return in.fileName(k.source, k.path)
	}
	return k.source + "/" + k.path
}

// fileKey identifies a file of a Load.
type fileKey struct{ source, path string }

// loadResult is the memoized outcome of executing one file.
type loadResult struct {
	globals starlark.StringDict
	err     error
}

// executing is a file whose top level is running.
type executing struct {
	key fileKey
	dir string // the directory relative load() paths start from
}

// loader resolves and executes the files of one Load. Starlark runs loads
// synchronously on the Load's one thread, so it needs no locking.
type loader struct {
	in     *Interpreter
	files  Files
	done   map[fileKey]loadResult // files executed, with their globals or error
	stack  []executing            // files being executed, outermost first
	loaded []LoadedFile           // every file read, in first-load order
	sites  Sites                  // where the files read build objects
	byName callers                // every file executed, by its name in positions
}

// entry executes the script itself.
func (ld *loader) entry(thread *starlark.Thread, script Script) (starlark.StringDict, error) {
	if script.Inline != nil {
		name := ld.in.scriptName(script)
		return ld.exec(thread, fileKey{script.Source, name}, name, ".", script.Inline)
	}
	if script.Source == "" {
		return nil, fmt.Errorf("script %q: no source", script.Path)
	}
	p, err := cleanPath(script.Path)
	if err != nil {
		return nil, fmt.Errorf("script %q: %w %q", script.Path, err, script.Source)
	}
	key := fileKey{script.Source, p}
	data, err := ld.read(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("script %q: file not found in source %q: %w", script.Path, script.Source, err)
	} else if err != nil {
		return nil, fmt.Errorf("script %q: source %q: %w", script.Path, script.Source, err)
	}
	return ld.exec(thread, key, ld.in.filename(key), path.Dir(p), data)
}

// load implements starlark.Thread.Load: it resolves module against the file
// being executed and executes the file it names, once per Load.
func (ld *loader) load(thread *starlark.Thread, module string) (starlark.StringDict, error) {
	cur := ld.stack[len(ld.stack)-1]
	key, err := resolveLoad(cur, module)
	if err != nil {
		return nil, err
	}
	if r, ok := ld.done[key]; ok {
		return r.globals, r.err
	}
	for i, e := range ld.stack {
		if e.key == key {
			cycle := make([]string, 0, len(ld.stack)-i+1)
			for _, e := range ld.stack[i:] {
				cycle = append(cycle, ld.in.filename(e.key))
			}
			cycle = append(cycle, ld.in.filename(key))
			return nil, &loadError{module: module, msg: "load cycle: " + strings.Join(cycle, " -> ")}
		}
	}
	data, err := ld.read(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &loadError{module: module, msg: fmt.Sprintf("file not found in source %q", key.source), err: err}
	} else if err != nil {
		return nil, &loadError{module: module, msg: fmt.Sprintf("source %q: %v", key.source, err), err: err}
	}
	globals, err := ld.exec(thread, key, ld.in.filename(key), path.Dir(key.path), data)
	ld.done[key] = loadResult{globals, err}
	return globals, err
}

// read reads a file of a source snapshot.
func (ld *loader) read(key fileKey) ([]byte, error) {
	if ld.files == nil {
		return nil, fs.ErrNotExist
	}
	return ld.files.ReadFile(key.source, key.path)
}

// exec compiles (cached) and executes one file's top level, returning its
// frozen globals.
func (ld *loader) exec(thread *starlark.Thread, key fileKey, filename, dir string, data []byte) (starlark.StringDict, error) {
	sum := sha256.Sum256(data)
	ld.loaded = append(ld.loaded, LoadedFile{Source: key.source, Path: key.path, Digest: "sha256:" + hex.EncodeToString(sum[:])})
	compiled, err := ld.in.compile(filename, data, sum)
	if err != nil {
		return nil, scriptError(err)
	}
	prog := compiled.prog
	for kind, ps := range compiled.sites {
		if ld.sites == nil {
			ld.sites = Sites{}
		}
		ld.sites[kind] = append(ld.sites[kind], ps...)
	}
	cur := executing{key: key, dir: dir}
	if _, ok := ld.byName[filename]; !ok {
		ld.byName[filename] = cur
	}
	ld.stack = append(ld.stack, cur)
	globals, err := prog.Init(thread, ld.in.predeclared)
	ld.stack = ld.stack[:len(ld.stack)-1]
	if err != nil {
		return nil, scriptError(err)
	}
	globals.Freeze()
	return globals, nil
}

// compile returns the program for a file's text, and the places in it that
// build objects, from the cache if it can.
func (in *Interpreter) compile(filename string, data []byte, sum [32]byte) (*programEntry, error) {
	key := programKey{sum: sum, filename: filename}
	if e, ok := in.programs.get(key); ok {
		return e, nil
	}
	in.programs.compiles.Add(1)
	f, prog, err := starlark.SourceProgramOptions(&fileOptions, filename, data, in.predeclared.Has)
	if err != nil {
		return nil, in.suggestNames(err)
	}
	e := &programEntry{key: key, prog: prog, sites: findSites(f)}
	in.programs.put(e)
	return e, nil
}

// resolveLoad resolves a load() module string against the file that loads
// it. "lib/x.star" is relative to that file's directory, "//lib/x.star" to
// its source's root, "@other//lib/x.star" to the root of source "other".
// Only .star files inside a source may be loaded.
func resolveLoad(cur executing, module string) (fileKey, error) {
	fail := func(msg string) (fileKey, error) {
		return fileKey{}, &loadError{module: module, msg: msg}
	}
	if strings.HasPrefix(module, "/") && !strings.HasPrefix(module, "//") {
		return fail("absolute paths are not allowed")
	}
	source, p, ok := joinFrom(cur, module)
	if !ok {
		return fail(`want "@source//path"`)
	}
	if source == "" {
		return fail(`no source to load from (use "@source//path")`)
	}
	clean, err := cleanPath(p)
	if err != nil {
		return fail(fmt.Sprintf("%s %q", err, source))
	}
	if path.Ext(clean) != ".star" {
		return fail("only .star files can be loaded")
	}
	return fileKey{source, clean}, nil
}

// joinFrom resolves p against the file cur as load() resolves a module:
// "@name//p" is p in source name, "//p" is p from the root of cur's
// source, and any other p is relative to cur's directory. The path it
// returns is joined but not checked (cleanPath does that); an absolute p
// is returned as it is, for cleanPath to refuse. ok is false for "@"
// without a source name and "//".
func joinFrom(cur executing, p string) (source, joined string, ok bool) {
	switch {
	case strings.HasPrefix(p, "@"):
		name, rest, ok := strings.Cut(p[1:], "//")
		if !ok || name == "" {
			return "", "", false
		}
		return name, rest, true
	case strings.HasPrefix(p, "//"):
		return cur.key.source, p[2:], true
	case strings.HasPrefix(p, "/"):
		return cur.key.source, p, true
	}
	return cur.key.source, path.Join(cur.dir, p), true
}

// cleanPath cleans a slash-separated path that must stay inside its source.
// Its errors read well followed by the source's quoted name.
func cleanPath(p string) (string, error) {
	switch {
	case strings.HasPrefix(p, "/"):
		return "", errors.New("absolute path not allowed in source")
	case strings.ContainsAny(p, "\\\x00"):
		return "", errors.New("invalid character in path in source")
	}
	clean := path.Clean(p)
	switch {
	case clean == ".." || strings.HasPrefix(clean, "../"):
		return "", errors.New("path escapes source")
	case clean == ".":
		return "", errors.New("not a file path in source")
	}
	return clean, nil
}
