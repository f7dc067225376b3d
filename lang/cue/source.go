//go:build !leanoperator

package cue

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/load"
	"cuelang.org/go/cue/parser"
)

// source is a schema package, loaded and parsed once; compile builds it
// into a fresh CUE context as often as the context is recycled.
type source struct {
	mu   sync.Mutex // building reads and writes the instance
	inst *build.Instance
	// lazy skips evaluating the whole package when compiling: a transform
	// is evaluated, with its inputs filled in, by each use.
	lazy bool
}

func loadSource(name string, fsys fs.FS, dir string) (*source, error) {
	d, err := cleanDir(dir)
	if err != nil {
		return nil, err
	}
	cfg := &load.Config{
		FS:  fsys,
		Dir: path.Join("/", d),
		FromFSPath: func(p string) string {
			return name + "/" + strings.TrimPrefix(p, "/")
		},
		// The registry is off: a dependency must be in the tree.
		Env: []string{"CUE_REGISTRY=none"},
	}
	if anonymous(fsys, d) {
		cfg.Package = "_" // files without a package clause, as cue vet takes them
	}
	insts := load.Instances([]string{"."}, cfg)
	if len(insts) != 1 {
		return nil, fmt.Errorf("directory %q: %d CUE packages", d, len(insts))
	}
	if insts[0].Err != nil {
		err := withPositions(insts[0].Err)
		// What CUE v0.17 says when a package imports one of cue.mod/gen
		// (or pkg, usr), which it only finds on the host's file system.
		if strings.Contains(err.Error(), "cannot get absolute path for FS") {
			err = fmt.Errorf("%w (packages under cue.mod/gen, cue.mod/pkg and cue.mod/usr cannot be imported from a snapshot: make them packages of the module)", err)
		}
		return nil, err
	}
	return &source{inst: insts[0]}, nil
}

// compile builds the package into a new context, and checks it.
func (s *source) compile() (*evaluator, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := cuecontext.New()
	v := ctx.BuildInstance(s.inst)
	if err := v.Err(); err != nil {
		return nil, withPositions(err)
	}
	if s.lazy {
		return newEvaluator(ctx, v), nil
	}
	if err := v.Validate(cue.Definitions(true)); err != nil {
		return nil, withPositions(err)
	}
	return newEvaluator(ctx, v), nil
}

// positionedError is a CUE error whose message names, for each error it
// holds, the file:line:col of the CUE source where it arose.
type positionedError struct{ err error }

func withPositions(err error) error { return &positionedError{err} }

func (e *positionedError) Unwrap() error { return e.err }

func (e *positionedError) Error() string {
	var b strings.Builder
	errs := cueerrors.Errors(e.err)
	for _, ce := range errs {
		// "N errors in empty disjunction:" only announces the errors that
		// follow it.
		if len(errs) > 1 && isDisjunctionSummary(ce) {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if ps := positions(ce); len(ps) > 0 {
			b.WriteString(ps[0].String())
			b.WriteString(": ")
		}
		b.WriteString(ce.Error())
	}
	return b.String()
}

// message is the error's message without its path and positions.
func message(e cueerrors.Error) string {
	format, args := e.Msg()
	return fmt.Sprintf(format, args...)
}

// positions are the error's positions in files.
func positions(e cueerrors.Error) []Position {
	var ps []Position
	for _, p := range cueerrors.Positions(e) {
		if p.Filename() == "" {
			continue
		}
		ps = append(ps, Position{File: p.Filename(), Line: p.Line(), Column: p.Column()})
	}
	return ps
}

// formatPath writes a CUE error path as an object path:
// spec.containers[0].image, metadata.labels["app.kubernetes.io/name"].
func formatPath(sels []string) string {
	var b strings.Builder
	for _, s := range sels {
		switch {
		case s == "":
		case isIndex(s):
			b.WriteString("[" + s + "]")
		case strings.HasPrefix(s, `"`):
			b.WriteString("[" + s + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// isIdent reports whether #s is a CUE definition name.
func isIdent(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return s != ""
}

// lookupDef finds #name in the package; it reports false when there is none.
func lookupDef(pkg cue.Value, name string) (cue.Value, bool) {
	if !isIdent(name) {
		return cue.Value{}, false
	}
	v := pkg.LookupPath(cue.MakePath(cue.Def(name)))
	return v, v.Exists()
}

// anonymous reports whether dir holds .cue files and none of them has a
// package clause.
func anonymous(fsys fs.FS, dir string) bool {
	name, found := packageName(fsys, dir)
	return found && name == ""
}

// packageName returns the package the .cue files of dir declare, "" when
// none declares one; found is false when dir holds no .cue file.
func packageName(fsys fs.FS, dir string) (name string, found bool) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".cue" {
			continue
		}
		found = true
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		f, err := parser.ParseFile(e.Name(), b, parser.PackageClauseOnly)
		if err == nil && f.PackageName() != "" {
			return f.PackageName(), true
		}
	}
	return "", found
}
