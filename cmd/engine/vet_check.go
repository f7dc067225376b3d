package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/worker"
	"github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	"github.com/manifestsync/manifestsync/operator/crd"
)

// Finding categories: what was checked.
const (
	categorySpec   = "spec"   // the ManifestSync itself: CRD schema, CEL rules, engine rules
	categorySchema = "schema" // an output object against the ManifestSync's spec.schemas
	categoryPolicy = "policy" // an output object against a --policy package
)

// ruleSpec is the rule of the engine's own checks of a spec that the CRD
// cannot express (patches that parse, label selectors).
const ruleSpec = "spec"

// ruleCollision is the rule of two targets that write one object.
const ruleCollision = "collision"

// position is a place in a file; Line and Column are 1-based, 0 if unknown.
type position struct {
	File   string `json:"file"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
}

// lineOnly is the position without its column: "file:line".
func (p position) lineOnly() position {
	p.Column = 0
	return p
}

func (p position) String() string {
	switch {
	case p.Line > 0 && p.Column > 0:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
	case p.Line > 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return p.File
}

// finding is one problem vet reports.
type finding struct {
	Category string
	// Rule names the check: a crd.Rule* for the CRD, "spec" for the
	// engine's checks, the CUE definition (#Deployment) for schemas and
	// policies.
	Rule string
	// Field is the offending field: of the ManifestSync for spec
	// findings, of the object otherwise; may be empty.
	Field   string
	Message string
	// Pos is where the problem is: the ManifestSync's line for spec
	// findings, the schema's or policy's line for object findings.
	Pos position
	// Sync is where in the ManifestSync's file the finding belongs: the
	// field for spec findings, the target for object findings.
	Sync position
	// SyncName is the ManifestSync's namespace/name.
	SyncName string
	// Target and Object identify the output object ("dev",
	// "Deployment web-dev/web"); empty for spec findings.
	Target string
	Object string
	// Origin is where the Starlark transform builds the object, when the
	// engine can tell; zero otherwise.
	Origin position
	// tree holds the files Pos and Origin name, for showing their lines
	// under the finding in the text report; nil shows none.
	tree *tree
}

// text is the finding's message with its field.
func (f *finding) text() string {
	if f.Field == "" {
		return f.Message
	}
	return f.Field + ": " + f.Message
}

// objectID names the object with its target: "dev/Deployment web-dev/web".
func (f *finding) objectID() string {
	if f.Object == "" {
		return f.Target
	}
	return f.Target + "/" + f.Object
}

// vetReport is the outcome of a vet run, from which every format is written.
type vetReport struct {
	Syncs []*syncReport
	// Errors are the problems that kept something from being checked.
	Errors []*vetError
}

// findings returns every finding, in report order.
func (r *vetReport) findings() []*finding {
	var out []*finding
	for _, s := range r.Syncs {
		out = append(out, s.Findings...)
		for _, t := range s.Targets {
			out = append(out, t.Findings...)
		}
	}
	return out
}

// syncReport is one ManifestSync document and what was found in it.
type syncReport struct {
	Pos       position // the file and the document's first line
	Name      string
	Namespace string
	// Findings are those of the spec, then a cycle of spec.dependsOn
	// it is on; when the spec has any, the ManifestSync is not
	// evaluated.
	Findings []*finding
	// Targets are the evaluated targets, or those the spec names when the
	// evaluation did not happen.
	Targets []*targetReport
	// Err says why the ManifestSync could not be evaluated; it is in the
	// report's Errors too.
	Err *vetError
}

// displayName is "namespace/name" of the ManifestSync.
func (s *syncReport) displayName() string { return namespacedName(s.Namespace, s.Name) }

// targetReport is one target of a ManifestSync.
type targetReport struct {
	ID       string
	Line     int // of the target in the ManifestSync's file
	Findings []*finding
	Err      *vetError
}

// vetError is a problem that kept vet from checking something.
type vetError struct {
	Pos position
	Msg string
	// tree holds the files the error may name, for showing their lines.
	tree *tree
}

func (e *vetError) Error() string {
	if e.Pos.File == "" || strings.HasPrefix(e.Msg, e.Pos.File+":") {
		return e.Msg
	}
	return e.Pos.String() + ": " + e.Msg
}

// policy is a --policy package.
type policy struct {
	dir string // as given, slash-separated
	pkg worker.Schemas
}

// loadPolicies reads each --policy directory, and compiles it as a CUE
// package in a worker (a policy is code: compiling one can take any time
// and memory). The worker keeps the compiled packages for checkPolicies.
func loadPolicies(ctx context.Context, pool *worker.Pool, limits lstar.Limits, dirs []string) ([]*policy, error) {
	var out []*policy
	for _, dir := range dirs {
		rctx, timeout, cancel := readDeadline(ctx, limits.Timeout)
		snap, err := readWithin(rctx, timeout, dir, func(context.Context) (*engine.Snapshot, error) {
			return source.Dir(dir, source.Limits{})
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("--policy %s: %w", dir, err)
		}
		name := filepath.ToSlash(filepath.Clean(dir))
		p := &policy{dir: name, pkg: worker.Schemas{Name: name, Files: snap.Files, Dir: "."}}
		_, err = pool.Validate(ctx, p.pkg, nil)
		if err, ok := killed("--policy "+dir, err); ok {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("--policy %s: %w", dir, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// vetter checks ManifestSyncs.
type vetter struct {
	pool     *worker.Pool // evaluates and validates
	policies []*policy
	limits   lstar.Limits
	// charts are the chart renderer and the capabilities charts see.
	charts engine.Options
	// sources are the --source overrides, by source name; each applies
	// to every ManifestSync with a source of that name.
	sources map[string]string
	// keys decrypt the SOPS files of ManifestSyncs with spec.decryption.
	keys sopsKeyFile
	// namespaces are the cluster's, for namespaceSelector targets; nil
	// when none were given, and each such target is evaluated in a
	// namespace made up to match its selector.
	namespaces givenNamespaces
	stderr     io.Writer // for notes that are not findings
	rep        *vetReport
	// overridden are the source names of --source that some checked
	// ManifestSync has.
	overridden map[string]bool
}

// run checks every ManifestSync under paths.
func (v *vetter) run(ctx context.Context, paths []string) *vetReport {
	v.rep = &vetReport{}
	v.overridden = map[string]bool{}
	files, errs := findCandidates(paths)
	for _, err := range errs {
		v.rep.Errors = append(v.rep.Errors, &vetError{Msg: err.Error()})
	}
	var checked []*syncDoc // by v.rep.Syncs
	for _, c := range files {
		rctx, timeout, cancel := readDeadline(ctx, v.limits.Timeout)
		docs, err := readWithin(rctx, timeout, c.path, func(context.Context) ([]*syncDoc, error) { return readSyncDocs(c) })
		cancel()
		if err != nil {
			v.rep.Errors = append(v.rep.Errors, &vetError{Pos: position{File: c.path}, Msg: err.Error()})
			continue
		}
		for _, d := range docs {
			v.rep.Syncs = append(v.rep.Syncs, v.check(ctx, d))
			checked = append(checked, d)
		}
	}
	findCycles(v.rep.Syncs, checked)
	if len(v.rep.Syncs) > 0 {
		for _, name := range slices.Sorted(maps.Keys(v.sources)) {
			if !v.overridden[name] {
				v.rep.Errors = append(v.rep.Errors, &vetError{Msg: fmt.Sprintf("--source %s=%s: no ManifestSync checked has a source named %q", name, v.sources[name], name)})
			}
		}
	}
	return v.rep
}

// check runs every check of one ManifestSync: the spec first, and only when
// it is clean the evaluation and the checks of its output.
func (v *vetter) check(ctx context.Context, d *syncDoc) *syncReport {
	s := &syncReport{Pos: position{File: d.file, Line: d.root.Line}}
	if md, ok := d.obj["metadata"].(map[string]any); ok {
		s.Name, _ = md["name"].(string)
		s.Namespace, _ = md["namespace"].(string)
	}
	s.Targets = specTargets(d)
	v.noteOverrides(d)
	files := newTree(d.file, d.data, nil, nil)
	failAt := func(line int, err error) *syncReport {
		s.Err = &vetError{Pos: position{File: d.file, Line: line}, Msg: err.Error(), tree: files}
		v.rep.Errors = append(v.rep.Errors, s.Err)
		return s
	}
	fail := func(err error) *syncReport { return failAt(s.Pos.Line, err) }

	ms, findings, err := v.checkSpec(ctx, d, s.displayName())
	if err != nil {
		return fail(err)
	}
	if len(findings) > 0 {
		for _, f := range findings {
			f.tree = files
		}
		s.Findings = findings
		return s
	}

	// Sources are read as engine eval reads them (git and helm sources
	// without a local copy are fetched, a chart in another source read
	// from it); vet words a missing copy its own way.
	dir := filepath.Dir(d.file)
	for i, src := range ms.Spec.Sources {
		_, overridden := v.sources[src.Name]
		if src.Kustomize == nil && src.Git == nil && src.Helm == nil && !overridden && conventionalPath(dir, src.Name) == "" {
			return failAt(d.line(fmt.Sprintf("spec.sources[%d]", i)), fmt.Errorf("source %q: no local copy: put it at %s (a directory) or %s.yaml (an object), or give --source %s=PATH", src.Name, filepath.Join(dir, src.Name), filepath.Join(dir, src.Name), src.Name))
		}
	}
	sf := &engine.SyncFile{Name: d.file, Sync: ms}
	rctx, timeout, cancel := readDeadline(ctx, v.limits.Timeout)
	defer cancel()
	snaps, err := readWithin(rctx, timeout, d.file+": reading its sources", func(ctx context.Context) (map[string]*engine.Snapshot, error) {
		return readSources(ctx, sf, v.sources, v.keys)
	})
	var se *source.Error
	if errors.As(err, &se) {
		return failAt(d.line(fmt.Sprintf("spec.sources[%d]", se.Index)), err)
	} else if err != nil {
		return fail(err)
	}
	files = newTree(d.file, d.data, snaps, nil)
	namespaces := v.namespaces.local
	if namespaces == nil {
		namespaces = offlineNamespaces(&ms.Spec)
	}
	res, err := v.pool.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Snapshots: snaps, Name: ms.Name}, engine.Options{
		Limits:            v.limits,
		Namespaces:        namespaces,
		ClusterNamespaces: v.namespaces.options(&ms.Spec, namespaces),
		Helm:              v.charts.Helm,
		Capabilities:      v.charts.Capabilities,
	})
	if err, ok := killed("ManifestSync "+s.displayName(), err); ok {
		return fail(err)
	}
	if err != nil {
		return fail(err)
	}
	for _, name := range unmatchedSelectors(selectorTargets(&ms.Spec, nil), res) {
		warning(v.stderr, "%s:%d: target %q: its namespaceSelector matches no namespace (%d given); nothing to check", d.file, d.line(targetField(&ms.Spec, name)), name, len(namespaces))
	}
	files = newTree(d.file, d.data, snaps, res.Redactor)
	for _, p := range v.policies {
		for rel, data := range p.pkg.Files {
			files.files[schemaFile(p.dir, rel)] = data
		}
	}
	s.Targets = nil
	order := map[string]int{}
	for i, t := range res.Targets {
		order[t.ID()] = i
	}
	for i, t := range res.Targets {
		field := targetField(&ms.Spec, t.Name)
		tr := &targetReport{ID: t.ID(), Line: d.line(field)}
		s.Targets = append(s.Targets, tr)
		syncPos := position{File: d.file, Line: tr.Line}
		tr.Findings = schemaFindings(t, syncPos, s.displayName())
		var verr *engine.ValidationError
		switch {
		case len(t.Collisions) > 0:
			// A finding once per pair, at the second target.
			for _, c := range t.Collisions {
				if order[c.Other] < i {
					tr.Findings = append(tr.Findings, &finding{
						Category: categorySpec, Rule: ruleCollision, Field: field, Message: c.String(),
						Pos: syncPos, Sync: syncPos, SyncName: s.displayName(), Target: t.ID(), Object: c.Object,
					})
				}
			}
		case t.Err == nil:
			fs, err := v.checkPolicies(ctx, t, syncPos, s.displayName())
			tr.Findings = append(tr.Findings, fs...)
			if err != nil {
				tr.Err = &vetError{Pos: syncPos, Msg: err.Error(), tree: files}
				v.rep.Errors = append(v.rep.Errors, tr.Err)
			}
		case !errors.As(t.Err, &verr):
			// Schema violations are findings; anything else kept the
			// target from being evaluated.
			tr.Err = &vetError{Pos: syncPos, Msg: t.Err.Error(), tree: files}
			v.rep.Errors = append(v.rep.Errors, tr.Err)
		}
		for _, f := range tr.Findings {
			f.tree = files
		}
	}
	s.redact(res.Redactor)
	return s
}

// noteOverrides records which --source names the document's spec.sources
// has, read as it is, whether or not it is evaluated.
func (v *vetter) noteOverrides(d *syncDoc) {
	spec, _ := d.obj["spec"].(map[string]any)
	list, _ := spec["sources"].([]any)
	for _, s := range list {
		m, _ := s.(map[string]any)
		if name, ok := m["name"].(string); ok {
			if _, given := v.sources[name]; given {
				v.overridden[name] = true
			}
		}
	}
}

// redact masks the Secret values of the evaluation in every message of
// the report: a policy's message quotes the value it is about.
func (s *syncReport) redact(r *redact.Redactor) {
	for _, t := range s.Targets {
		for _, f := range t.Findings {
			f.Message = r.String(f.Message)
		}
		if t.Err != nil {
			t.Err.Msg = r.String(t.Err.Msg)
		}
	}
}

// checkSpec validates the ManifestSync against the CRD, as the API server
// would, and then against the engine's own rules; it returns the decoded
// ManifestSync when both pass. The object evaluated is the one in the
// file, as engine eval reads it, not the defaulted one.
func (v *vetter) checkSpec(ctx context.Context, d *syncDoc, syncName string) (*v1alpha1.ManifestSync, []*finding, error) {
	validator, err := crd.ManifestSync()
	if err != nil {
		return nil, nil, err
	}
	_, crdErrs, err := validator.Validate(ctx, d.obj)
	if err != nil {
		return nil, nil, err
	}
	var findings []*finding
	add := func(rule, field, msg string) {
		pos := position{File: d.file, Line: d.line(field)}
		findings = append(findings, &finding{Category: categorySpec, Rule: rule, Field: field, Message: msg, Pos: pos, Sync: pos, SyncName: syncName})
	}
	for _, e := range crdErrs {
		msg := e.Msg
		if near := engine.SuggestField(e.Field); e.Rule == crd.RuleStrict && near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		add(e.Rule, e.Field, msg)
	}
	if len(findings) == 0 {
		ms := &v1alpha1.ManifestSync{}
		b, err := json.Marshal(d.obj)
		if err != nil {
			return nil, nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(ms); err != nil {
			// The CRD was generated from the Go types, so this means
			// the two disagree: a bug, not a finding.
			return nil, nil, fmt.Errorf("decoding the ManifestSync: %w", err)
		}
		for _, e := range engine.Validate(&ms.Spec) {
			add(ruleSpec, e.Field, e.Msg)
		}
		if len(findings) == 0 {
			return ms, nil, nil
		}
	}
	// By line; a finding about the whole object (the CEL rules were
	// skipped) comes last.
	sort.SliceStable(findings, func(i, j int) bool {
		a, b := findings[i], findings[j]
		if (a.Field == "") != (b.Field == "") {
			return b.Field == ""
		}
		return a.Pos.Line < b.Pos.Line
	})
	return nil, findings, nil
}

// specTargets lists the targets a ManifestSync names, read from the
// document as it is, for reporting on a ManifestSync that was not evaluated.
func specTargets(d *syncDoc) []*targetReport {
	spec, _ := d.obj["spec"].(map[string]any)
	list, _ := spec["targets"].([]any)
	var out []*targetReport
	for i, t := range list {
		m, _ := t.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			name = fmt.Sprintf("targets[%d]", i)
		}
		out = append(out, &targetReport{ID: name, Line: d.line(fmt.Sprintf("spec.targets[%d]", i))})
	}
	return out
}

// targetField is the field path of the target named name.
func targetField(spec *v1alpha1.ManifestSyncSpec, name string) string {
	for i, t := range spec.Targets {
		if t.Name == name {
			return fmt.Sprintf("spec.targets[%d]", i)
		}
	}
	return "spec.targets"
}

// schemaFindings turns the violations of a target's objects against the
// ManifestSync's spec.schemas into findings.
//
// SEAM (spec.schemas): this and the *engine.ValidationError test in check
// are the only places that read the engine's schema validation. The engine
// reports it as TargetResult.Violations ([]engine.Violation: the object,
// "Deployment web-dev/web", and its cue.Violation) and fails the target
// with a *engine.ValidationError holding them; if that shape changes, only
// these change. A target that fails validation has no objects, so the
// policies do not see them.
func schemaFindings(t *engine.TargetResult, sync position, syncName string) []*finding {
	var out []*finding
	for _, v := range t.Violations {
		f := violationFinding(categorySchema, "", v.Violation, sync, syncName, t.ID(), v.Object)
		if v.Origin.File != "" {
			f.Origin = position{File: v.Origin.File, Line: v.Origin.Line, Column: v.Origin.Column}
		}
		out = append(out, f)
	}
	return out
}

// checkPolicies validates every object of a target against every --policy
// package, in a worker. An error means a validation could not run.
func (v *vetter) checkPolicies(ctx context.Context, t *engine.TargetResult, sync position, syncName string) ([]*finding, error) {
	if len(v.policies) == 0 {
		return nil, nil
	}
	objects := make([]map[string]any, len(t.Objects))
	for i, o := range t.Objects {
		objects[i] = o.Object
	}
	results := make([][]worker.Validation, len(v.policies)) // by policy, then object
	for j, p := range v.policies {
		var err error
		results[j], err = v.pool.Validate(ctx, p.pkg, objects)
		if k, ok := killed("--policy "+p.dir, err); ok {
			return nil, fmt.Errorf("target %q: %w", t.ID(), k)
		}
		if err != nil {
			return nil, fmt.Errorf("target %q: --policy %s: %w", t.ID(), p.dir, err)
		}
	}
	var out []*finding
	for i, o := range t.Objects {
		for j, p := range v.policies {
			r := results[j][i]
			if r.Err != "" {
				return out, fmt.Errorf("target %q: %s: --policy %s: %s", t.ID(), v1alpha1.IDOf(o).String(), p.dir, r.Err)
			}
			for _, cv := range r.Violations {
				out = append(out, violationFinding(categoryPolicy, p.dir, cv, sync, syncName, t.ID(), v1alpha1.IDOf(o).String()))
			}
		}
	}
	return out, nil
}

// violationFinding makes a finding of a CUE violation, located at the
// schema's innermost position, or at the target when CUE gives none. dir,
// when set, is the directory the schema package was loaded from, for
// positions relative to it.
func violationFinding(category, dir string, v cue.Violation, sync position, syncName, target, object string) *finding {
	f := &finding{
		SyncName: syncName,
		Category: category,
		Rule:     v.Rule,
		Field:    v.Path,
		Message:  v.Msg,
		Pos:      sync,
		Sync:     sync,
		Target:   target,
		Object:   object,
	}
	if f.Rule == "" {
		f.Rule = category
	}
	if len(v.Pos) > 0 {
		p := v.Pos[0]
		f.Pos = position{File: schemaFile(dir, p.File), Line: p.Line, Column: p.Column}
	}
	return f
}

// schemaFile names a schema file by the path a user can open: CUE positions
// of a package loaded with name dir may or may not start with it.
func schemaFile(dir, name string) string {
	switch {
	case path.IsAbs(name) || filepath.IsAbs(name):
		return name
	case dir == "" || dir == "." || strings.HasPrefix(name, dir+"/"):
		return path.Clean(name)
	}
	return path.Join(dir, name)
}

// nonLabel matches what a namespace name cannot hold.
var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// offlineNamespaces makes up a namespace for each namespaceSelector target,
// labelled so that its selector matches, so that vet evaluates such targets
// without a cluster. The namespace is named after the target.
func offlineNamespaces(spec *v1alpha1.ManifestSyncSpec) []engine.Namespace {
	out := []engine.Namespace{}
	used := map[string]bool{}
	for _, t := range spec.Targets {
		sel := t.NamespaceSelector
		if sel == nil {
			continue
		}
		labels := map[string]string{}
		for k, v := range sel.MatchLabels {
			labels[k] = v
		}
		for _, r := range sel.MatchExpressions {
			switch r.Operator {
			case metav1.LabelSelectorOpIn:
				if len(r.Values) > 0 {
					labels[r.Key] = r.Values[0]
				}
			case metav1.LabelSelectorOpExists:
				labels[r.Key] = "true"
			}
		}
		name := strings.Trim(nonLabel.ReplaceAllString(strings.ToLower(t.Name), "-"), "-")
		if name == "" {
			name = "selected"
		}
		for i, base := 2, name; used[name]; i++ {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		used[name] = true
		out = append(out, engine.Namespace{Name: name, Labels: labels})
	}
	return out
}
