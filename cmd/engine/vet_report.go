package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/crd"
)

// writeVetText writes one line per finding:
//
//	FILE:LINE: RULE: MESSAGE
//	FILE:LINE: RULE: MESSAGE (SYNC-FILE:LINE: TARGET/Kind namespace/name[, built at SCRIPT:LINE])
//
// the second form for problems of output objects, naming the transform's
// line that builds the object when the engine knows it.
//
// The report stays one line a finding, for tools that read it; under each
// line, on stderr, go FILE's line with a caret under the column (the rule
// of a schema or policy, the field of the ManifestSync) and SCRIPT's line,
// as they go under errors: a terminal, or a log of both streams, shows
// each finding with its lines.
func writeVetText(w, stderr io.Writer, rep *vetReport) error {
	color := colorOn(stderr)
	for _, f := range rep.findings() {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s: %s", f.Pos.lineOnly(), f.Rule, f.text())
		if f.Target != "" {
			fmt.Fprintf(&b, " (%s: %s", f.Sync.lineOnly(), f.objectID())
			if f.Origin.File != "" {
				fmt.Fprintf(&b, ", built at %s", f.Origin.lineOnly())
			}
			b.WriteByte(')')
		}
		b.WriteByte('\n')
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
		if f.tree == nil {
			continue
		}
		var s strings.Builder
		f.tree.snippet(&s, filePos{File: f.Pos.File, Line: f.Pos.Line, Col: f.Pos.Column}, color)
		if f.Origin.File != "" {
			f.tree.snippet(&s, filePos{File: f.Origin.File, Line: f.Origin.Line, Col: f.Origin.Column}, color)
		}
		if _, err := io.WriteString(stderr, s.String()); err != nil {
			return err
		}
	}
	return nil
}

// The JSON report: every finding, every error, and what was checked.
type (
	jsonVetReport struct {
		Findings []jsonFinding  `json:"findings"`
		Errors   []jsonVetError `json:"errors"`
		Checked  []jsonChecked  `json:"checked"`
	}
	jsonFinding struct {
		position
		Category string    `json:"category"`
		Rule     string    `json:"rule"`
		Field    string    `json:"field,omitempty"`
		Message  string    `json:"message"`
		Sync     jsonSync  `json:"sync"`
		Target   string    `json:"target,omitempty"`
		Object   string    `json:"object,omitempty"`
		Origin   *position `json:"origin,omitempty"`
	}
	jsonSync struct {
		position
		Name string `json:"name,omitempty"`
	}
	jsonVetError struct {
		position
		Message string `json:"message"`
	}
	jsonChecked struct {
		position
		Name      string   `json:"name"`
		Namespace string   `json:"namespace,omitempty"`
		Targets   []string `json:"targets"`
	}
)

func writeVetJSON(w, _ io.Writer, rep *vetReport) error {
	out := jsonVetReport{Findings: []jsonFinding{}, Errors: []jsonVetError{}, Checked: []jsonChecked{}}
	for _, f := range rep.findings() {
		jf := jsonFinding{
			position: f.Pos, Category: f.Category, Rule: f.Rule, Field: f.Field, Message: f.Message,
			Sync: jsonSync{position: f.Sync, Name: f.SyncName}, Target: f.Target, Object: f.Object,
		}
		if f.Origin.File != "" {
			jf.Origin = &f.Origin
		}
		out.Findings = append(out.Findings, jf)
	}
	for _, e := range rep.Errors {
		out.Errors = append(out.Errors, jsonVetError{position: e.Pos, Message: e.Msg})
	}
	for _, s := range rep.Syncs {
		c := jsonChecked{position: s.Pos, Name: s.Name, Namespace: s.Namespace, Targets: []string{}}
		for _, t := range s.Targets {
			c.Targets = append(c.Targets, t.ID)
		}
		out.Checked = append(out.Checked, c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// The JUnit report, in the shape CI systems read (Jenkins, GitLab, GitHub
// actions): a test suite per ManifestSync, a test case per target.
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Errors   int          `xml:"errors,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name     string      `xml:"name,attr"`
		File     string      `xml:"file,attr,omitempty"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Errors   int         `xml:"errors,attr"`
		Cases    []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		File      string        `xml:"file,attr,omitempty"`
		Line      int           `xml:"line,attr,omitempty"`
		Failure   *junitProblem `xml:"failure,omitempty"`
		Error     *junitProblem `xml:"error,omitempty"`
	}
	junitProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",cdata"`
	}
)

// writeVetJUnit writes a test case per target of every ManifestSync. A
// finding of the spec fails every target (none of them can be applied);
// a ManifestSync without targets gets one test case, "spec".
func writeVetJUnit(w, _ io.Writer, rep *vetReport) error {
	out := junitSuites{Name: "engine vet"}
	for _, s := range rep.Syncs {
		suite := junitSuite{Name: s.Pos.File + " " + s.displayName(), File: s.Pos.File}
		targets := s.Targets
		if len(targets) == 0 {
			targets = []*targetReport{{ID: "spec", Line: s.Pos.Line}}
		}
		for _, t := range targets {
			c := junitCase{Name: t.ID, Classname: s.displayName(), File: s.Pos.File, Line: t.Line}
			if fs := append(append([]*finding{}, s.Findings...), t.Findings...); len(fs) > 0 {
				c.Failure = junitFailure(fs)
				suite.Failures++
			}
			if e := t.Err; e != nil || s.Err != nil {
				if e == nil {
					e = s.Err
				}
				c.Error = &junitProblem{Message: firstLine(e.Msg), Type: "error", Text: e.Error()}
				suite.Errors++
			}
			suite.Cases = append(suite.Cases, c)
		}
		suite.Tests = len(suite.Cases)
		out.Tests += suite.Tests
		out.Failures += suite.Failures
		out.Errors += suite.Errors
		out.Suites = append(out.Suites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// junitFailure folds a test case's findings into its one failure element.
func junitFailure(fs []*finding) *junitProblem {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s: %s: %s", f.Pos, f.Rule, f.text())
		if f.Object != "" {
			fmt.Fprintf(&b, " (%s)", f.Object)
		}
		b.WriteByte('\n')
	}
	msg := fmt.Sprintf("%s: %s", fs[0].Rule, fs[0].text())
	if len(fs) > 1 {
		msg = fmt.Sprintf("%s (and %s)", msg, plural.Count(len(fs)-1, "more finding"))
	}
	return &junitProblem{Message: msg, Type: fs[0].Rule, Text: b.String()}
}

// The SARIF 2.1.0 log: one run, a rule per distinct rule id, a result per
// finding, and the errors as tool execution notifications.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool        sarifTool         `json:"tool"`
		Invocations []sarifInvocation `json:"invocations"`
		Results     []sarifResult     `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri,omitempty"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID               string       `json:"id"`
		ShortDescription sarifMessage `json:"shortDescription"`
	}
	sarifMessage struct {
		Text string `json:"text"`
	}
	sarifResult struct {
		RuleID           string          `json:"ruleId"`
		RuleIndex        int             `json:"ruleIndex"`
		Level            string          `json:"level"`
		Message          sarifMessage    `json:"message"`
		Locations        []sarifLocation `json:"locations"`
		RelatedLocations []sarifLocation `json:"relatedLocations,omitempty"`
	}
	sarifLocation struct {
		ID               *int                  `json:"id,omitempty"`
		PhysicalLocation sarifPhysicalLocation `json:"physicalLocation"`
		Message          *sarifMessage         `json:"message,omitempty"`
	}
	sarifPhysicalLocation struct {
		ArtifactLocation sarifArtifactLocation `json:"artifactLocation"`
		Region           *sarifRegion          `json:"region,omitempty"`
	}
	sarifArtifactLocation struct {
		URI string `json:"uri"`
	}
	sarifRegion struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn,omitempty"`
	}
	sarifInvocation struct {
		ExecutionSuccessful bool                `json:"executionSuccessful"`
		Notifications       []sarifNotification `json:"toolExecutionNotifications,omitempty"`
	}
	sarifNotification struct {
		Level     string          `json:"level"`
		Message   sarifMessage    `json:"message"`
		Locations []sarifLocation `json:"locations,omitempty"`
	}
)

// ruleDescriptions describe the rules that are not CUE definitions.
var ruleDescriptions = map[string]string{
	crd.RuleType:     "The apiVersion and kind are those of the ManifestSync CRD.",
	crd.RuleStrict:   "Every field is known to the ManifestSync CRD (the API server rejects unknown fields).",
	crd.RuleMetadata: "The object metadata is valid (name, namespace, labels, annotations).",
	crd.RuleSchema:   "The ManifestSync matches the CRD's OpenAPI schema: types, enums, required fields, bounds.",
	crd.RuleList:     "Lists keyed by name (sources, targets) have no duplicate keys.",
	crd.RuleCEL:      "The ManifestSync passes the CRD's CEL validation rules.",
	ruleSpec:         "The ManifestSync passes the engine's checks of its spec (patches, selectors, references).",
	ruleCollision:    "No two targets write one object (the same cluster, namespace, kind and name).",
	ruleCycle:        "No ManifestSync depends on itself through spec.dependsOn (the operator would sync none of the cycle).",
}

func writeVetSARIF(w, _ io.Writer, rep *vetReport) error {
	run := sarifRun{
		Tool: sarifTool{Driver: sarifDriver{
			Name:           "engine vet",
			Version:        buildVersion(),
			InformationURI: "https://manifestsync.dev",
			Rules:          []sarifRule{},
		}},
		Invocations: []sarifInvocation{{ExecutionSuccessful: len(rep.Errors) == 0}},
		Results:     []sarifResult{},
	}
	index := map[string]int{}
	for _, f := range rep.findings() {
		i, ok := index[f.Rule]
		if !ok {
			i = len(run.Tool.Driver.Rules)
			index[f.Rule] = i
			desc := ruleDescriptions[f.Rule]
			if desc == "" {
				desc = fmt.Sprintf("Output objects satisfy the CUE definition %s (%s).", f.Rule, f.Category)
			}
			run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{ID: f.Rule, ShortDescription: sarifMessage{Text: desc}})
		}
		msg := f.text()
		if f.Target != "" {
			msg = fmt.Sprintf("%s: %s", f.objectID(), msg)
		}
		r := sarifResult{
			RuleID:    f.Rule,
			RuleIndex: i,
			Level:     "error",
			Message:   sarifMessage{Text: msg},
			Locations: []sarifLocation{sarifLoc(f.Pos, "")},
		}
		if f.Sync != f.Pos {
			loc := sarifLoc(f.Sync, fmt.Sprintf("target %s of ManifestSync %s", f.Target, f.SyncName))
			id := 1
			loc.ID = &id
			r.RelatedLocations = []sarifLocation{loc}
		}
		if f.Origin.File != "" {
			loc := sarifLoc(f.Origin, "where the transform builds the object")
			id := len(r.RelatedLocations) + 1
			loc.ID = &id
			r.RelatedLocations = append(r.RelatedLocations, loc)
		}
		run.Results = append(run.Results, r)
	}
	for _, e := range rep.Errors {
		n := sarifNotification{Level: "error", Message: sarifMessage{Text: e.Msg}}
		if e.Pos.File != "" {
			n.Locations = []sarifLocation{sarifLoc(e.Pos, "")}
		}
		run.Invocations[0].Notifications = append(run.Invocations[0].Notifications, n)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{
		Schema:  "https://json.schemastore.org/sarif-2.1.0.json",
		Version: "2.1.0",
		Runs:    []sarifRun{run},
	})
}

// sarifLoc is a physical location; a relative path stays a relative URI
// reference (resolved against the repository root by code scanning).
func sarifLoc(p position, msg string) sarifLocation {
	loc := sarifLocation{PhysicalLocation: sarifPhysicalLocation{ArtifactLocation: sarifArtifactLocation{URI: fileURI(p.File)}}}
	if p.Line > 0 {
		loc.PhysicalLocation.Region = &sarifRegion{StartLine: p.Line, StartColumn: p.Column}
	}
	if msg != "" {
		loc.Message = &sarifMessage{Text: msg}
	}
	return loc
}

// fileURI turns a file path into a URI reference: "dir/sync.yaml" for
// relative paths, "file:///abs/sync.yaml" for absolute ones.
func fileURI(p string) string {
	slash := filepath.ToSlash(p)
	if filepath.IsAbs(p) {
		if !strings.HasPrefix(slash, "/") {
			slash = "/" + slash // C:/x on Windows
		}
		return (&url.URL{Scheme: "file", Path: slash}).String()
	}
	return (&url.URL{Path: slash}).String()
}
