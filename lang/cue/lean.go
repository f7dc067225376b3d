//go:build leanoperator

package cue

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/manifestsync/manifestsync/internal/lean"
)

// The lean operator (internal/lean) links no CUE: what follows is the
// package's API refusing with lean.ErrNotLinked, for the code that
// imports it but that the operator never runs in its own process (a CUE
// transform, schemas, cue.export: its evaluation workers run them).

// source and evaluator stand for the compiled package and its CUE
// context; none is ever made.
type source struct{}

type evaluator struct {
	uses  int
	bytes int64
}

func loadSource(name string, _ fs.FS, _ string) (*source, error) {
	return nil, notLinked(name)
}

func (*source) compile() (*evaluator, error) { return nil, lean.ErrNotLinked }

func (*evaluator) validate(_, _ map[string]any, _ string) (map[string]any, []Violation, error) {
	return nil, nil, lean.ErrNotLinked
}

func prepare(map[string]any) (map[string]any, int64, error) { return nil, 0, lean.ErrNotLinked }

func notLinked(name string) error { return fmt.Errorf("CUE package %q: %w", name, lean.ErrNotLinked) }

// Program is a CUE package; the lean operator loads none.
type Program struct{}

// LoadProgram refuses: no CUE in this binary.
func LoadProgram(name string, _ map[string][]byte, _ string) (*Program, error) {
	return nil, notLinked(name)
}

// Export refuses: no CUE in this binary.
func (*Program) Export(context.Context, map[string]any, string) (any, error) {
	return nil, lean.ErrNotLinked
}

// Transform is a CUE transform; the lean operator loads none.
type Transform struct{}

// LoadTransform refuses: no CUE in this binary.
func LoadTransform(name string, _ map[string][]byte, _, _ string) (*Transform, error) {
	return nil, notLinked(name)
}

// Eval refuses: no CUE in this binary.
func (*Transform) Eval(context.Context, Input) ([]map[string]any, error) {
	return nil, lean.ErrNotLinked
}

// Format refuses: no CUE in this binary.
func Format(name string, _ []byte) ([]byte, error) {
	return nil, fmt.Errorf("formatting %s: %w", name, lean.ErrNotLinked)
}
