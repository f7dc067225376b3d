package worker

import (
	"context"
	"fmt"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/lang/cue"
)

// Schemas is a CUE package to validate objects with (cue.Load): its files,
// the directory of the package among them, and the name its positions use.
type Schemas struct {
	Name  string            `json:"name"`
	Files map[string][]byte `json:"files"`
	Dir   string            `json:"dir"`
}

// Validation is the outcome of one object against one package: its
// violations, or why it could not be validated.
type Validation struct {
	Violations []cue.Violation `json:"violations,omitempty"`
	Err        string          `json:"err,omitempty"`
}

type validateRequest struct {
	Package Schemas          `json:"package"`
	Objects []map[string]any `json:"objects,omitempty"`
}

type validateResponse struct {
	// Results are by object.
	Results []Validation `json:"results,omitempty"`
	// Err says why the package does not load.
	Err *wireError `json:"err,omitempty"`
}

// Validate unifies every object with the package in a worker, as
// cue.Schemas.Validate does, and returns the outcomes by object. The
// package is loaded (compiled) in the worker too, and kept there for the
// next call; with no objects, Validate only loads it. The error says why
// the package does not load, or is a *KilledError when the worker had to
// be killed (memory limit, timeout, ctx done) or crashed.
func (p *Pool) Validate(ctx context.Context, pkg Schemas, objects []map[string]any) ([]Validation, error) {
	req := &validateRequest{Package: pkg, Objects: make([]map[string]any, len(objects))}
	for i, o := range objects {
		req.Objects[i], _ = exact(o).(map[string]any)
	}
	var (
		out    []Validation
		valErr error
	)
	err := p.run(ctx, message{Validate: req}, func(_ *process, m message) (bool, error) {
		if m.Validated == nil {
			return false, errUnexpected
		}
		out, valErr = m.Validated.Results, fromWireError(m.Validated.Err, nil)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if valErr == nil && len(out) != len(objects) {
		return nil, fmt.Errorf("eval worker: %d validations of %d objects", len(out), len(objects))
	}
	return out, valErr
}

// validate loads the package, or takes it from the worker's cache, and
// validates every object with it.
func (s *server) validate(req *validateRequest) *validateResponse {
	pkg := req.Package
	key := pkg.Name + "\x00" + pkg.Dir + "\x00" + engine.ContentDigest(pkg.Files)
	schemas := s.schemas[key]
	if schemas == nil {
		var err error
		if schemas, err = cue.Load(pkg.Name, pkg.Files, pkg.Dir); err != nil {
			return &validateResponse{Err: toWireError(err, false)}
		}
		if s.schemas == nil {
			s.schemas = map[string]*cue.Schemas{}
		}
		s.schemas[key] = schemas
	}
	resp := &validateResponse{Results: make([]Validation, len(req.Objects))}
	for i, o := range req.Objects {
		obj, _ := numbers(o).(map[string]any)
		_, vs, err := schemas.Validate(obj)
		resp.Results[i] = Validation{Violations: vs}
		if err != nil {
			resp.Results[i].Err = err.Error()
		}
	}
	return resp
}
