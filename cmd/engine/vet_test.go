package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// vetFixtures runs engine vet over testdata/vet with its policy package and
// returns what it wrote and its exit status. The fixtures hold a clean
// ManifestSync, one breaking a CRD rule, one breaking the policy, one
// breaking its own schema and one whose script fails.
func vetFixtures(t *testing.T, args ...string) ([]byte, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"vet", "--policy", "testdata/vet/policy"}, args...)
	code := run(args, &stdout, &stderr)
	t.Logf("engine %s: exit %d\n%s", strings.Join(args, " "), code, stderr.String())
	return stdout.Bytes(), code
}

// TestVetSARIF validates the SARIF report against the official SARIF
// 2.1.0 schema (testdata/sarif-schema-2.1.0.json), formats included, with
// findings and errors, and without either.
func TestVetSARIF(t *testing.T) {
	f, err := os.Open("testdata/sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("sarif-schema-2.1.0.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("sarif-schema-2.1.0.json")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		path      string
		code      int
		rules     []string
		successes bool
	}{
		{path: "testdata/vet", code: exitUsage, rules: []string{"crd/cel", "#ConfigMap"}},
		{path: "testdata/vet/clean", code: exitOK, successes: true},
		{path: "testdata/vetcycle", code: exitFailed, rules: []string{ruleCycle}, successes: true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			out, code := vetFixtures(t, "-o", "sarif", tc.path)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if err := schema.Validate(inst); err != nil {
				t.Fatalf("not valid SARIF 2.1.0: %v\n%s", err, out)
			}
			var log struct {
				Runs []struct {
					Tool struct {
						Driver struct {
							Rules []struct{ ID string }
						}
					}
					Invocations []struct{ ExecutionSuccessful bool }
					Results     []struct {
						RuleID    string
						Locations []struct {
							PhysicalLocation struct {
								ArtifactLocation struct{ URI string }
								Region           struct{ StartLine int }
							}
						}
					}
				}
			}
			if err := json.Unmarshal(out, &log); err != nil {
				t.Fatal(err)
			}
			run := log.Runs[0]
			var rules []string
			for _, r := range run.Tool.Driver.Rules {
				rules = append(rules, r.ID)
			}
			if !slices.Equal(rules, tc.rules) {
				t.Errorf("rules %q, want %q", rules, tc.rules)
			}
			if got := run.Invocations[0].ExecutionSuccessful; got != tc.successes {
				t.Errorf("executionSuccessful %v, want %v", got, tc.successes)
			}
			for _, r := range run.Results {
				loc := r.Locations[0].PhysicalLocation
				if loc.ArtifactLocation.URI == "" || loc.Region.StartLine < 1 {
					t.Errorf("result %s has no file:line: %+v", r.RuleID, loc)
				}
			}
		})
	}
}

// TestVetJUnit parses the JUnit report: a test suite per ManifestSync, a
// test case per target, failures for findings and errors for evaluations
// that failed.
func TestVetJUnit(t *testing.T) {
	out, code := vetFixtures(t, "-o", "junit", "testdata/vet")
	if code != exitUsage {
		t.Errorf("exit %d, want %d (the evalerr fixture fails)", code, exitUsage)
	}
	type problem struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	var suites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Errors   int      `xml:"errors,attr"`
		Suites   []struct {
			Name  string `xml:"name,attr"`
			Tests int    `xml:"tests,attr"`
			Cases []struct {
				Name      string   `xml:"name,attr"`
				Classname string   `xml:"classname,attr"`
				Failure   *problem `xml:"failure"`
				Error     *problem `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(out, &suites); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, out)
	}
	// ManifestSync -> its targets' outcomes, in file order.
	got := map[string][]string{}
	for _, s := range suites.Suites {
		if s.Tests != len(s.Cases) {
			t.Errorf("suite %s: tests=%d, has %d test cases", s.Name, s.Tests, len(s.Cases))
		}
		for _, c := range s.Cases {
			outcome := c.Name + ":pass"
			switch {
			case c.Error != nil:
				outcome = c.Name + ":error"
			case c.Failure != nil:
				outcome = c.Name + ":failure"
				if !strings.Contains(c.Failure.Text, ".cue:") && !strings.Contains(c.Failure.Text, "sync.yaml:") {
					t.Errorf("failure of %s without a file:line: %q", c.Classname, c.Failure.Text)
				}
			}
			got[c.Classname] = append(got[c.Classname], outcome)
		}
	}
	want := map[string][]string{
		"platform/clean":   {"dev:pass", "prod:pass"},
		"platform/crd":     {"dev:failure"},
		"platform/evalerr": {"dev:error"},
		"platform/nolabel": {"dev:failure"},
		"platform/schema":  {"dev:failure"},
	}
	for name, w := range want {
		if !slices.Equal(got[name], w) {
			t.Errorf("%s: test cases %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("suites for %d ManifestSyncs, want %d", len(got), len(want))
	}
	if suites.Tests != 6 || suites.Failures != 3 || suites.Errors != 1 {
		t.Errorf("totals tests=%d failures=%d errors=%d, want 6, 3, 1", suites.Tests, suites.Failures, suites.Errors)
	}
}

// TestVetJSON checks that every finding of the JSON report has a file and a
// line, and object findings their ManifestSync, target and object.
func TestVetJSON(t *testing.T) {
	out, _ := vetFixtures(t, "-o", "json", "testdata/vet")
	var rep struct {
		Findings []struct {
			File, Category, Rule, Message string
			Line                          int
			Sync                          struct {
				File string
				Line int
			}
			Target, Object string
		}
		Errors []struct {
			File, Message string
			Line          int
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	categories := map[string]bool{}
	for _, f := range rep.Findings {
		categories[f.Category] = true
		if f.File == "" || f.Line < 1 || f.Sync.File == "" || f.Sync.Line < 1 {
			t.Errorf("finding without a file:line: %+v", f)
		}
		if f.Category != categorySpec && (f.Target == "" || f.Object == "") {
			t.Errorf("object finding without its target and object: %+v", f)
		}
	}
	for _, c := range []string{categorySpec, categorySchema, categoryPolicy} {
		if !categories[c] {
			t.Errorf("no %s finding in %s", c, out)
		}
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Message, "unknown binary op") {
		t.Errorf("errors %+v, want the evalerr fixture's", rep.Errors)
	}
}

// TestVetTextSnippets: with stdout and stderr one stream (a terminal, a CI
// log), each finding of the text report is followed by the lines it names,
// with a caret, before the next finding; stdout alone is one line a
// finding.
func TestVetTextSnippets(t *testing.T) {
	args := []string{"vet", "--policy", "testdata/vet/policy", "testdata/vet/crd", "testdata/vet/nolabel", "testdata/vet/schema"}
	var both bytes.Buffer
	if code := run(args, &both, &both); code != exitFailed {
		t.Fatalf("exit %d, want %d:\n%s", code, exitFailed, both.String())
	}
	want := `testdata/vet/crd/sync.yaml:6: crd/cel: spec.sources[0]: exactly one of git, oci, http, object, objects, kustomize and helm must be set
  --> testdata/vet/crd/sync.yaml:6
  |
6 |   - name: app
  |   ^
testdata/vet/policy/configmap.cue:7: #ConfigMap: metadata.labels.team: field is required but not present (testdata/vet/nolabel/sync.yaml:11: dev/ConfigMap web-dev/web)
  --> testdata/vet/policy/configmap.cue:7:4
  |
7 | 			team!: string
  | 			^
testdata/vet/schema/app/schemas/configmap.cue:5: #ConfigMap: data.replicas: conflicting values string and 3 (mismatched types string and int) (testdata/vet/schema/sync.yaml:13: dev/ConfigMap web-dev/web, built at testdata/vet/schema/app/main.star:2)
  --> testdata/vet/schema/app/schemas/configmap.cue:5:19
  |
5 | 	data?: [string]: string
  | 	                 ^
  --> testdata/vet/schema/app/main.star:2:13
  |
2 |     return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "labels": {"team": "web"}}, "data": {"replicas": 3}}]
  |             ^
engine: vet: 3 findings in 3 ManifestSyncs
`
	if both.String() != want {
		t.Errorf("got\n%s\nwant\n%s", both.String(), want)
	}

	var stdout, stderr bytes.Buffer
	run(args, &stdout, &stderr)
	if n := strings.Count(stdout.String(), "\n"); n != 3 || strings.Contains(stdout.String(), "^") {
		t.Errorf("stdout has %d lines, want one a finding and no snippet:\n%s", n, stdout.String())
	}
}
