package worker

import (
	"context"
	"errors"
	"time"

	"go.starlark.net/syntax"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// message is every frame of the protocol; exactly one field is set.
//
//	parent -> worker: config (first), then eval; scope answers a question
//	worker -> parent: ready (after config), scope questions, then result
//
// Besides evaluations, a worker runs test files (test, answered by output
// messages and then tested) and validates objects (validate, answered by
// validated).
type message struct {
	Config    *config           `json:"config,omitempty"`
	Ready     *ready            `json:"ready,omitempty"`
	Eval      *evalRequest      `json:"eval,omitempty"`
	Scope     *scopeMessage     `json:"scope,omitempty"`
	Result    *evalResponse     `json:"result,omitempty"`
	Test      *testRequest      `json:"test,omitempty"`
	Output    *string           `json:"output,omitempty"`
	Tested    *testResponse     `json:"tested,omitempty"`
	Validate  *validateRequest  `json:"validate,omitempty"`
	Validated *validateResponse `json:"validated,omitempty"`
}

// config sets up a worker before its first evaluation.
type config struct {
	MemoryLimit int64 `json:"memoryLimit"`
}

// ready answers config: the worker is bounded and waits for evaluations.
type ready struct {
	// AddressSpace is the RLIMIT_AS the worker set, 0 if none.
	AddressSpace uint64 `json:"addressSpace,omitempty"`
}

// scopeMessage asks (worker) or answers (parent) whether a kind is
// namespaced, for engine.Options.Scope, which only the parent can answer.
type scopeMessage struct {
	Group      string `json:"group,omitempty"`
	Version    string `json:"version,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespaced bool   `json:"namespaced,omitempty"`
	OK         bool   `json:"ok,omitempty"`
}

type evalRequest struct {
	Sync      *v1alpha1.ManifestSyncSpec `json:"sync"`
	Snapshots map[string]*wireSnapshot   `json:"snapshots"`
	Limits    lstar.Limits               `json:"limits"`
	Targets   []string                   `json:"targets,omitempty"`
	// Namespaces is nil offline: keep nil and empty apart.
	Namespaces *[]engine.Namespace `json:"namespaces,omitempty"`
	// ClusterNamespaces are the remote clusters', nil when not given;
	// JSON keeps a cluster's empty list apart from its missing one.
	ClusterNamespaces *map[string][]engine.Namespace `json:"clusterNamespaces,omitempty"`
	Workers           int                            `json:"workers,omitempty"`
	// AskScope says the parent has a Scope to ask; else BuiltinScope.
	AskScope bool `json:"askScope,omitempty"`
	// Name is the ManifestSync's (engine.Spec.Name).
	Name string `json:"name,omitempty"`
	// Helm says the parent renders charts (Options.Helm): the worker then
	// renders them with its own renderer (ServeOptions.Helm), with these
	// capabilities.
	Helm                bool                               `json:"helm,omitempty"`
	Capabilities        engine.HelmCapabilities            `json:"capabilities,omitzero"`
	ClusterCapabilities map[string]engine.HelmCapabilities `json:"clusterCapabilities,omitempty"`
}

type wireSnapshot struct {
	Revision string            `json:"revision,omitempty"`
	Files    map[string][]byte `json:"files,omitempty"`
	Object   map[string]any    `json:"object,omitempty"`
	Objects  []map[string]any  `json:"objects,omitempty"`
	Time     time.Time         `json:"time"`
	Origin   string            `json:"origin,omitempty"`
	// Refs are the ConfigMaps and Secrets the source read (Snapshot.Refs).
	Refs map[string]map[string]string `json:"refs,omitempty"`
	// Root is the repository tree a git path is built in (Snapshot.Root).
	Root map[string][]byte `json:"root,omitempty"`
	// Decrypted are the values of decrypted files (Snapshot.Decrypted).
	Decrypted []string `json:"decrypted,omitempty"`
}

type evalResponse struct {
	Result *wireResult `json:"result,omitempty"`
	Err    *wireError  `json:"err,omitempty"`
	// Retire says the worker exits after this answer: work it abandoned
	// at its deadline still runs in it (ServeOptions.Stuck).
	Retire bool `json:"retire,omitempty"`
}

type wireResult struct {
	Targets  []*wireTarget   `json:"targets"`
	Inputs   v1alpha1.Inputs `json:"inputs"`
	Revision string          `json:"revision"`
	// Secrets are what the result's Redactor masks.
	Secrets []string `json:"secrets,omitempty"`
}

type wireTarget struct {
	Name       string             `json:"name"`
	Namespace  string             `json:"namespace,omitempty"`
	Cluster    string             `json:"cluster,omitempty"`
	Objects    []map[string]any   `json:"objects,omitempty"`
	Digests    []string           `json:"digests,omitempty"`
	Digest     string             `json:"digest,omitempty"`
	Err        *wireError         `json:"err,omitempty"`
	Selected   bool               `json:"selected,omitempty"`
	Violations []engine.Violation `json:"violations,omitempty"`
	Collisions []engine.Collision `json:"collisions,omitempty"`
}

// wireError is an error's message and the causes callers test for with
// errors.As: a *engine.ValidationError (rebuilt from the target's
// violations) and a *lstar.LimitError.
type wireError struct {
	Msg        string     `json:"msg"`
	Validation bool       `json:"validation,omitempty"`
	Limit      *wireLimit `json:"limit,omitempty"`
}

type wireLimit struct {
	Limit string `json:"limit"`
	Value string `json:"value"`
	File  string `json:"file,omitempty"`
	Line  int32  `json:"line,omitempty"`
	Col   int32  `json:"col,omitempty"`
}

func toWireRequest(spec engine.Spec, opts engine.Options) *evalRequest {
	req := &evalRequest{
		Sync:      spec.Sync,
		Snapshots: make(map[string]*wireSnapshot, len(spec.Snapshots)),
		Limits:    opts.Limits,
		Targets:   opts.Targets,
		Workers:   opts.Workers,
		AskScope:  opts.Scope != nil,
		Name:      spec.Name,
		Helm:      opts.Helm != nil,

		Capabilities:        opts.Capabilities,
		ClusterCapabilities: opts.ClusterCapabilities,
	}
	if opts.Namespaces != nil {
		req.Namespaces = &opts.Namespaces
	}
	if opts.ClusterNamespaces != nil {
		req.ClusterNamespaces = &opts.ClusterNamespaces
	}
	for name, s := range spec.Snapshots {
		if s != nil {
			req.Snapshots[name] = toWireSnapshot(s)
		}
	}
	return req
}

func toWireSnapshot(s *engine.Snapshot) *wireSnapshot {
	if s == nil {
		return nil
	}
	w := &wireSnapshot{Revision: s.Revision, Files: s.Files, Root: s.Root, Time: s.Time, Origin: s.Origin, Refs: s.Refs, Decrypted: s.Decrypted}
	if s.Object != nil {
		w.Object, _ = exact(s.Object).(map[string]any)
	}
	if s.Objects != nil {
		w.Objects = make([]map[string]any, len(s.Objects))
		for i, o := range s.Objects {
			w.Objects[i], _ = exact(o).(map[string]any)
		}
	}
	return w
}

func fromWireSnapshot(w *wireSnapshot) *engine.Snapshot {
	if w == nil {
		return nil
	}
	s := &engine.Snapshot{Revision: w.Revision, Files: w.Files, Root: w.Root, Time: w.Time, Origin: w.Origin, Refs: w.Refs, Decrypted: w.Decrypted}
	if w.Object != nil {
		s.Object, _ = numbers(w.Object).(map[string]any)
	}
	if w.Objects != nil {
		s.Objects = make([]map[string]any, len(w.Objects))
		for i, o := range w.Objects {
			s.Objects[i], _ = numbers(o).(map[string]any)
		}
	}
	return s
}

// fromWireRequest is the engine's input; scope answers Options.Scope when
// the parent has one.
func fromWireRequest(req *evalRequest, scope engine.Scope) (engine.Spec, engine.Options) {
	spec := engine.Spec{Sync: req.Sync, Name: req.Name, Snapshots: make(map[string]*engine.Snapshot, len(req.Snapshots))}
	for name, w := range req.Snapshots {
		spec.Snapshots[name] = fromWireSnapshot(w)
	}
	opts := engine.Options{Limits: req.Limits, Targets: req.Targets, Workers: req.Workers, Capabilities: req.Capabilities, ClusterCapabilities: req.ClusterCapabilities}
	if req.Namespaces != nil {
		opts.Namespaces = *req.Namespaces
		if opts.Namespaces == nil {
			opts.Namespaces = []engine.Namespace{}
		}
	}
	if req.ClusterNamespaces != nil {
		opts.ClusterNamespaces = *req.ClusterNamespaces
		if opts.ClusterNamespaces == nil {
			opts.ClusterNamespaces = map[string][]engine.Namespace{}
		}
	}
	if req.AskScope {
		opts.Scope = scope
	}
	return spec, opts
}

func toWireResponse(res *engine.Result, err error) *evalResponse {
	out := &evalResponse{Err: toWireError(err, false)}
	if res == nil {
		return out
	}
	out.Result = &wireResult{Inputs: res.Inputs, Revision: res.Revision, Secrets: res.Redactor.Values(), Targets: make([]*wireTarget, len(res.Targets))}
	for i, t := range res.Targets {
		w := &wireTarget{
			Name: t.Name, Namespace: t.Namespace, Cluster: t.Cluster, Selected: t.Selected,
			Digests: t.Digests, Digest: t.Digest, Violations: t.Violations, Collisions: t.Collisions,
			Err: toWireError(t.Err, len(t.Violations) > 0),
		}
		w.Objects = make([]map[string]any, len(t.Objects))
		for j, o := range t.Objects {
			w.Objects[j], _ = exact(o.Object).(map[string]any)
		}
		out.Result.Targets[i] = w
	}
	return out
}

func fromWireResponse(resp *evalResponse) (*engine.Result, error) {
	err := fromWireError(resp.Err, nil)
	if resp.Result == nil {
		return nil, err
	}
	w := resp.Result
	res := &engine.Result{Inputs: w.Inputs, Revision: w.Revision, Redactor: redact.New(w.Secrets...), Targets: make([]*engine.TargetResult, len(w.Targets))}
	for i, wt := range w.Targets {
		t := &engine.TargetResult{
			Name: wt.Name, Namespace: wt.Namespace, Cluster: wt.Cluster, Selected: wt.Selected,
			Digests: wt.Digests, Digest: wt.Digest, Violations: wt.Violations, Collisions: wt.Collisions,
			Err: fromWireError(wt.Err, wt.Violations),
		}
		if re, ok := t.Err.(*remoteError); ok && len(wt.Collisions) > 0 {
			re.cause = &engine.CollisionError{Collisions: wt.Collisions}
		}
		if wt.Objects != nil {
			t.Objects = make([]*unstructured.Unstructured, len(wt.Objects))
			for j, o := range wt.Objects {
				m, _ := numbers(o).(map[string]any)
				t.Objects[j] = &unstructured.Unstructured{Object: m}
			}
		}
		res.Targets[i] = t
	}
	return res, err
}

func toWireError(err error, validation bool) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error(), Validation: validation}
	var le *lstar.LimitError
	if errors.As(err, &le) {
		w.Limit = &wireLimit{Limit: le.Limit, Value: le.Value, File: le.Pos.Filename(), Line: le.Pos.Line, Col: le.Pos.Col}
	}
	return w
}

func fromWireError(w *wireError, violations []engine.Violation) error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Msg}
	switch {
	case w.Validation:
		e.cause = &engine.ValidationError{Violations: violations}
	case w.Limit != nil:
		le := &lstar.LimitError{Limit: w.Limit.Limit, Value: w.Limit.Value}
		if le.Limit == lstar.LimitTimeout {
			le.Err = context.DeadlineExceeded
		}
		if w.Limit.File != "" || w.Limit.Line != 0 {
			file := w.Limit.File
			le.Pos = syntax.MakePosition(&file, w.Limit.Line, w.Limit.Col)
		}
		e.cause = le
	}
	return e
}

// remoteError is an error that happened in a worker: its message as the
// worker wrote it, and the cause callers may look for with errors.As.
type remoteError struct {
	msg   string
	cause error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.cause }

func gvkOf(m *scopeMessage) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: m.Group, Version: m.Version, Kind: m.Kind}
}
