package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/plural"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// vetFlags are the flags of engine vet.
type vetFlags struct {
	policies  []string
	output    string
	limits    lstar.Limits
	maxMemory string
	sources   []string
	// sopsKeyFile is --sops-age-key-file (else SOPS_AGE_KEY_FILE).
	sopsKeyFile string
	// namespaces are the cluster's, for namespaceSelector targets.
	namespaces namespaceFlags
	// caps are what charts see of the cluster.
	caps capabilityFlags
}

// vetFormats are the report formats of -o, by name: each writes the
// report to stdout; the text report writes the lines its findings name to
// stderr, as errors' are.
var vetFormats = map[string]func(stdout, stderr io.Writer, rep *vetReport) error{
	"text":  writeVetText,
	"json":  writeVetJSON,
	"junit": writeVetJUnit,
	"sarif": writeVetSARIF,
}

func newVetCmd() *cobra.Command {
	var f vetFlags
	cmd := &cobra.Command{
		Use:   "vet [PATHS...]",
		Short: "Check ManifestSync files for CI: CRD schema, evaluation, schemas and policies",
		Long: `Check every ManifestSync under PATHS (default "."): YAML files holding a
document of kind ManifestSync, found by walking directories; files named
on the command line must hold one.

Each ManifestSync is validated against the ManifestSync CRD as the API
server would (OpenAPI schema, defaults, CEL rules, unknown fields), then
evaluated with its sources read as engine eval reads them (--source
NAME=PATH for every ManifestSync with a source NAME, else the directory
NAME, or the file NAME.yaml, beside the ManifestSync), and every output
object is validated against the ManifestSync's spec.schemas and against
each --policy package (a directory of CUE files: an object of kind K is
unified with #K and #Object where the package defines them).

A target with a namespaceSelector is evaluated in each namespace it
matches among those of --namespaces FILE and --namespace NAME[,KEY=VALUE...]
(as engine eval takes them); without either, in one namespace made up to
match its selector.

Two targets that write one object (the same cluster, namespace, kind and
name) are a finding at the second target's line.

A cycle of spec.dependsOn among the ManifestSyncs read (a depends on b,
b on a, or one on itself), which the operator would never sync, is a
finding at each one's dependsOn entry that leads around the cycle; a
dependency on a ManifestSync vet did not read is not checked.

Every finding names a file and line: the ManifestSync's for problems of
its spec, the schema's or policy's for problems of an output object, with
the ManifestSync's target and the object (TARGET/Kind namespace/name).

Formats (-o): text, one line per finding
  FILE:LINE: RULE: MESSAGE (SYNC-FILE:LINE: TARGET/Kind namespace/name)
(under each, on stderr, the lines it names with a caret under the column,
as under errors: the schema's or policy's rule, the transform's line that
builds the object); json, junit (one test case per ManifestSync target)
and sarif (2.1.0).

Every evaluation, and the loading of the policies and the validation
against them, runs in a worker process: its memory is bounded by
--max-memory and the wall-clock time of each ManifestSync's evaluation
(from loading the sources' code to validating the output), of loading a
policy and of validating a target's objects against one by --timeout. One
past either is an error naming the limit.

Exit status: 0 no findings, 1 findings, 2 errors (bad flags, unreadable
or malformed input, an evaluation that failed or was stopped at a limit).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVet(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.policies, "policy", nil, "DIR: a CUE policy package every output object must satisfy (repeatable)")
	fl.StringVarP(&f.output, "output", "o", "text", "report format: text, json, junit or sarif")
	fl.StringArrayVar(&f.sources, "source", nil, "NAME=DIR|FILE|URL[@REF]: read source NAME of every ManifestSync that has one from a local directory or file, or fetch it from Git (repeatable)")
	addSOPSKeyFlag(fl, &f.sopsKeyFile)
	addNamespaceFlags(fl, &f.namespaces)
	addCapabilityFlags(fl, &f.caps)
	addLimitFlags(fl, &f.limits)
	addMaxMemoryFlag(fl, &f.maxMemory)
	return cmd
}

// runVet checks every ManifestSync under paths, writes the report and
// turns the outcome into the exit status.
func runVet(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, f *vetFlags, paths []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	write, ok := vetFormats[f.output]
	if !ok {
		return usageErr("vet: -o %q: want text, json, junit or sarif", f.output)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	sources, err := parseSourceFlags(f.sources)
	if err != nil {
		return err
	}
	namespaces, err := f.namespaces.load(ctx, f.limits.Timeout, stdin)
	if err != nil {
		return err
	}
	var charts engine.Options
	if err := f.caps.options("vet", &charts); err != nil {
		return err
	}
	pool, stop, err := newSandbox("vet", f.maxMemory, f.limits.Timeout)
	if err != nil {
		return err
	}
	defer stop()
	policies, err := loadPolicies(ctx, pool, f.limits, f.policies)
	if err != nil {
		return usageErr("vet: %w", err)
	}
	v := &vetter{pool: pool, policies: policies, limits: f.limits, charts: charts, sources: sources, keys: sopsKeys(f.sopsKeyFile), namespaces: namespaces, stderr: stderr}
	rep := v.run(ctx, paths)
	if err := write(stdout, stderr, rep); err != nil {
		return usageErr("vet: writing the report: %w", err)
	}
	color := colorOn(stderr)
	for _, e := range rep.Errors {
		writeError(stderr, programName+": vet: ", e, e.tree, color)
	}
	findings := len(rep.findings())
	switch {
	case len(rep.Errors) > 0:
		return &exitError{code: exitUsage, err: fmt.Errorf("vet: %s, %s", plural.Count(len(rep.Errors), "error"), plural.Count(findings, "finding"))}
	case findings > 0:
		return failed(fmt.Errorf("vet: %s in %s", plural.Count(findings, "finding"), plural.Count(len(rep.Syncs), "ManifestSync")))
	case len(rep.Syncs) == 0:
		return usageErr("vet: no ManifestSync found in %v", paths)
	}
	fmt.Fprintf(stderr, "%s: vet: no findings in %s\n", programName, plural.Count(len(rep.Syncs), "ManifestSync"))
	return nil
}

// errNoSync is a file named on the command line that holds no ManifestSync.
var errNoSync = errors.New("no ManifestSync (kind ManifestSync) in the file")
