package engine

import (
	"fmt"
	"strings"

	"github.com/manifestsync/manifestsync/lang/cue"
)

// Violation is one way an output object breaks the ManifestSync's schemas.
type Violation struct {
	// Object names the object: "Deployment web-dev/web".
	Object string
	// Origin is where the Starlark transform builds objects of the
	// object's kind, when it does so in one place; zero otherwise.
	Origin cue.Position
	cue.Violation
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Object)
	if v.Path != "" {
		b.WriteString(": ")
		b.WriteString(v.Path)
	}
	b.WriteString(": ")
	b.WriteString(v.Msg)
	if len(v.Pos) > 0 {
		p := v.Pos[0]
		fmt.Fprintf(&b, " (%s:%d:%d)", p.File, p.Line, p.Column)
	}
	if v.Origin.File != "" {
		fmt.Fprintf(&b, " [built at %s:%d]", v.Origin.File, v.Origin.Line)
	}
	return b.String()
}

// ValidationError is a target whose objects break their schemas.
type ValidationError struct {
	Violations []Violation
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		msgs[i] = v.String()
	}
	n := "violation"
	if len(msgs) > 1 {
		n += "s"
	}
	return fmt.Sprintf("%d schema %s:\n  %s", len(msgs), n, strings.Join(msgs, "\n  "))
}

// loadSchemas compiles spec.schemas: directories of sources and builtin sets.
func (e *evaluation) loadSchemas() error {
	for i, ref := range e.spec.Schemas {
		var (
			s   *cue.Schemas
			err error
		)
		if ref.Builtin != "" {
			s, err = cue.Builtin(ref.Builtin)
		} else {
			snap := e.snaps[ref.Source]
			name := strings.TrimSuffix(snap.FileName(ref.Source, ""), "/")
			s, err = cue.Load(name, snap.Files, ref.Path)
		}
		if err != nil {
			return fmt.Errorf("spec.schemas[%d]: %w", i, err)
		}
		e.schemas = append(e.schemas, s)
	}
	return nil
}

// schemasDigest covers the schema references and the content of every
// schema directory, so that editing a schema changes the revision.
func (e *evaluation) schemasDigest() (string, error) {
	type entry struct {
		Ref     string
		Content string
	}
	entries := make([]entry, 0, len(e.spec.Schemas))
	for _, ref := range e.spec.Schemas {
		if ref.Builtin != "" {
			entries = append(entries, entry{Ref: "builtin:" + ref.Builtin})
			continue
		}
		sub, err := e.snaps[ref.Source].Sub(ref.Path)
		if err != nil {
			return "", fmt.Errorf("schemas: source %q: %w", ref.Source, err)
		}
		entries = append(entries, entry{Ref: ref.Source + ":" + ref.Path, Content: ContentDigest(sub.Files)})
	}
	return digestTyped(entries)
}

// validateObjects unifies every object with every schema set, in place:
// CUE defaults fill the objects. It returns the violations of all objects.
func (e *evaluation) validateObjects(objs []map[string]any, names []string, origins []cue.Position) ([]Violation, error) {
	var out []Violation
	for i := range objs {
		for _, s := range e.schemas {
			filled, vs, err := s.Validate(objs[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", names[i], err)
			}
			for _, v := range vs {
				out = append(out, Violation{Object: names[i], Origin: origins[i], Violation: v})
			}
			if len(vs) == 0 && filled != nil {
				objs[i] = filled
			}
		}
	}
	return out, nil
}

// origin is where the Starlark transform builds objects of kind, if it
// does so in one place.
func (e *evaluation) origin(kind string) cue.Position {
	if e.module == nil {
		return cue.Position{}
	}
	pos, ok := e.module.Site(kind)
	if !ok {
		return cue.Position{}
	}
	return cue.Position{File: pos.Filename(), Line: int(pos.Line), Column: int(pos.Col)}
}
