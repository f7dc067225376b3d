package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	yaml3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/worker"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

type evalFlags struct {
	file    string
	sources []string
	// sopsKeyFile is --sops-age-key-file (sopsKeys: else
	// SOPS_AGE_KEY_FILE).
	sopsKeyFile string
	targets     []string
	sets        []string
	output      string
	outDir      string
	limits      lstar.Limits
	// showSecrets prints Secret values; by default they are masked.
	showSecrets bool
	// maxMemory bounds the worker the evaluation runs in (a quantity).
	maxMemory string
	// namespaces are the cluster's, for namespaceSelector targets.
	namespaces namespaceFlags
	// caps are what charts see of the cluster.
	caps capabilityFlags
	// watch re-evaluates whenever a file the evaluation read changes;
	// diff then prints what changed since the last good render.
	watch, diff bool
}

func newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval -f sync.yaml",
		Short: "Evaluate a ManifestSync offline and print every target's objects",
		Long: `Evaluate a ManifestSync offline and print every target's objects.

Sources come from --source NAME=DIR (a directory), NAME=FILE (an object,
or a one-file tree) or NAME=URL[@REF] (a Git repository). Without --source,
a source NAME is read from the directory NAME, or the file NAME.yaml, beside
sync.yaml (for a git source, eval then says on stderr, in a line that
starts "note:", that the copy replaces the revision the spec pins, and
the inputs show its revision as
local:PATH@DIGEST); failing that, a git source is fetched as the spec says,
with the credentials of its secretRef read from SECRET.yaml beside
sync.yaml (a Secret manifest) when it has one. Fetched repositories are
cached under the user cache directory (manifestsync/git), so a second run
costs one ref listing. REF is a branch, a commit hash, or tag:NAME, semver:RANGE,
branch:NAME, commit:HASH.

A target with a namespaceSelector is evaluated once per namespace it
matches among those given with --namespaces FILE (what kubectl get
namespaces -o yaml or -o json prints, or Namespace documents; - reads
stdin) and --namespace NAME[,KEY=VALUE...] (repeatable); without either
flag such a target is an error. A target of a remote cluster matches
that cluster's namespaces, given with --cluster-namespaces SECRET[/KEY]=FILE
(its kubeconfig Secret; KEY defaults to value). A selector that matches
none is said on stderr, in a line that starts "warning:".

-o json gives, beside each target's objects, its waves: the order the
operator applies them in, by the manifestsync.dev/wave annotation, else
argocd.argoproj.io/sync-wave (ascending, default 0; a Namespace or a CRD
goes to the wave of the first object that needs it), inside a wave in
Argo CD's kind order (Namespaces first, CRDs before custom resources,
webhook configurations last), then by name, each object as
"Kind namespace/name". Hooks are not in it. A wave that is not an integer
fails its target.

Secret values are masked as *** in what eval prints or writes, as in its
errors; --show-secrets prints them (for piping into kubectl apply). Digests
are always those of the real objects.

The evaluation runs in a worker process: its memory is bounded by
--max-memory and its wall-clock time, from loading the sources' code to
validating the output, by --timeout. An evaluation past either ends with
an error naming the limit, and exit status 2.

Errors name FILE:LINE[:COL]; under each place in a file the evaluation
read, the line is shown with a caret under the column (in colour on a
terminal, unless NO_COLOR is set), its Secret values masked.

--watch evaluates again on every save of the sync file, the scripts, the
files they load and the local sources, and prints the result again: on a
terminal in place of the last, otherwise after a "--- render N ---" line.
--diff prints a unified diff against the last good render instead. A
render that fails shows its error on stderr and keeps the last good
output. SIGINT or SIGTERM ends the watch with status 0.

Exit status: 0 success, 1 evaluation failed, 2 usage or input error, or an
evaluation stopped at --max-memory or --timeout.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				// cobra's NoArgs would say `unknown command "DIR"`.
				return fmt.Errorf("eval: takes no arguments, got %q: name the ManifestSync file with -f (engine eval -f DIR/sync.yaml)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEval(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the ManifestSync file (required)")
	fl.StringArrayVar(&f.sources, "source", nil, "NAME=DIR|FILE|URL[@REF]: read source NAME from a local directory or file, or fetch it from Git (repeatable)")
	fl.StringArrayVar(&f.targets, "target", nil, "evaluate only this target (repeatable)")
	fl.StringArrayVar(&f.sets, "set", nil, "KEY=VALUE: set a param for every target; KEY may be dotted (a.b.c), VALUE is YAML (repeatable)")
	fl.StringVarP(&f.output, "output", "o", "yaml", "output format: yaml or json")
	fl.StringVar(&f.outDir, "out-dir", "", "write one file per target, DIR/TARGET.yaml, instead of printing")
	fl.BoolVar(&f.showSecrets, "show-secrets", false, "print the values of Secrets (and of other objects' strings that hold them); by default they are masked as ***")
	fl.BoolVarP(&f.watch, "watch", "w", false, "re-evaluate whenever the sync file, a script, a file it loads or a local source changes, and print the result again")
	fl.BoolVar(&f.diff, "diff", false, "with --watch: print what changed since the last good render, as a unified diff, instead of the whole result")
	addSOPSKeyFlag(fl, &f.sopsKeyFile)
	addNamespaceFlags(fl, &f.namespaces)
	addCapabilityFlags(fl, &f.caps)
	addLimitFlags(fl, &f.limits)
	addMaxMemoryFlag(fl, &f.maxMemory)
	return cmd
}

type flagSet interface {
	Uint64Var(p *uint64, name string, value uint64, usage string)
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	IntVar(p *int, name string, value int, usage string)
	Int64Var(p *int64, name string, value int64, usage string)
}

func addLimitFlags(fl flagSet, l *lstar.Limits) {
	d := lstar.DefaultLimits()
	fl.Uint64Var(&l.MaxSteps, "max-steps", d.MaxSteps, "Starlark execution steps per target")
	fl.DurationVar(&l.Timeout, "timeout", d.Timeout, "wall-clock limit of the whole evaluation: loading, compiling, running and validating")
	fl.IntVar(&l.MaxObjects, "max-objects", d.MaxObjects, "objects a target may have")
	fl.Int64Var(&l.MaxBytes, "max-bytes", d.MaxBytes, "total size of a target's objects, in bytes of JSON")
}

func runEval(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, f *evalFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.file == "" {
		return usageErr("eval: -f sync.yaml is required")
	}
	if f.output != "yaml" && f.output != "json" {
		return usageErr("eval: -o %q: want yaml or json", f.output)
	}
	if f.diff && !f.watch {
		return usageErr("eval: --diff needs --watch")
	}
	if f.watch && f.outDir != "" {
		return usageErr("eval: --watch prints: it does not take --out-dir")
	}
	pool, stop, err := newSandbox("eval", f.maxMemory, f.limits.Timeout)
	if err != nil {
		return err
	}
	defer stop()
	namespaces, err := f.namespaces.load(ctx, f.limits.Timeout, stdin)
	if err != nil {
		return err
	}
	if f.watch {
		return watchEval(ctx, pool, namespaces, stdout, stderr, f)
	}
	_, err = evalOnce(ctx, pool, namespaces, stdout, stderr, f)
	return err
}

// evalRun is what one evaluation read: the sync file and the sources'
// snapshots (for watching them, and for showing the lines errors name).
type evalRun struct {
	snaps map[string]*engine.Snapshot
}

// evalOnce reads the sync file and the sources, evaluates them in pool
// and writes the result to stdout. Its errors show the lines they name.
func evalOnce(ctx context.Context, pool *worker.Pool, namespaces givenNamespaces, stdout, stderr io.Writer, f *evalFlags) (*evalRun, error) {
	run := &evalRun{}
	// The sync file and the sources are read within --timeout, as the
	// evaluation then runs within it.
	rctx, timeout, cancel := readDeadline(ctx, f.limits.Timeout)
	defer cancel()
	data, err := readUserFile(rctx, timeout, f.file)
	if err != nil {
		return run, &exitError{code: exitUsage, err: err}
	}
	sf, err := engine.LoadSyncFile(f.file, data)
	if err != nil {
		return run, &exitError{code: exitUsage, err: err, tree: newTree(f.file, data, nil, nil)}
	}
	spec := &sf.Sync.Spec
	if err := applySets(spec, f.sets); err != nil {
		return run, err
	}
	for _, name := range f.targets {
		if !slices.ContainsFunc(spec.Targets, func(t v1alpha1.Target) bool { return t.Name == name }) {
			return run, usageErr("eval: --target %s: %s has no target named %q", name, f.file, name)
		}
	}
	selectors := selectorTargets(spec, f.targets)
	if local := localSelectorTargets(spec, f.targets); namespaces.local == nil && len(local) > 0 {
		return run, failed(fmt.Errorf("%s: target %q has a namespaceSelector, which needs the cluster's namespaces: give them with %s", f.file, local[0], namespacesUsage))
	}
	if target, flag := namespaces.missingCluster(spec, f.targets); target != "" {
		return run, failed(fmt.Errorf("%s: target %q has a namespaceSelector in a remote cluster, which needs that cluster's namespaces: give them with %s", f.file, target, flag))
	}
	snaps, err := readWithin(rctx, timeout, "reading its sources", func(ctx context.Context) (map[string]*engine.Snapshot, error) {
		return resolveSources(ctx, sf, f.sources, sopsKeys(f.sopsKeyFile))
	})
	if err != nil {
		// The sync file names the sources: "sync.yaml: source "app": ...".
		return run, withTree(inFile(f.file, err), newTree(f.file, data, nil, nil))
	}
	cancel()
	run.snaps = snaps
	for _, line := range localSources(sf, snaps, f.sources) {
		note(stderr, "%s", line)
	}
	opts := engine.Options{
		Limits:            f.limits,
		Targets:           f.targets,
		Namespaces:        namespaces.local,
		ClusterNamespaces: namespaces.options(spec, nil),
	}
	if err := f.caps.options("eval", &opts); err != nil {
		return run, err
	}
	res, err := pool.Evaluate(ctx, engine.Spec{Sync: spec, Snapshots: snaps, Name: sf.Sync.Name}, opts)
	if err, ok := killed(f.file, err); ok {
		return run, err
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", f.file, err)
		if err, ok := timedOut(err); ok {
			return run, withTree(err, newTree(f.file, data, snaps, nil))
		}
		return run, withTree(failed(err), newTree(f.file, data, snaps, nil))
	}
	for _, name := range unmatchedSelectors(selectors, res) {
		warning(stderr, "target %q: its namespaceSelector matches no namespace (%d given)", name, len(namespaces.local))
	}
	placePatchErrors(sf, res)
	if err := writeResult(stdout, res, f); err != nil {
		return run, &exitError{code: exitUsage, err: err}
	}
	if err := res.Err(); err != nil {
		t := newTree(f.file, data, snaps, res.Redactor)
		if err, ok := timedOut(err); ok {
			return run, withTree(err, t)
		}
		return run, withTree(failed(err), t)
	}
	return run, nil
}

// inFile puts the name of the file err is about in front of its message,
// keeping its exit code.
func inFile(name string, err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		ee.err = fmt.Errorf("%s: %w", name, ee.err)
		return ee
	}
	return fmt.Errorf("%s: %w", name, err)
}

// withTree makes err show the lines of t it names, keeping its exit code.
func withTree(err error, t *tree) error {
	var ee *exitError
	if errors.As(err, &ee) {
		ee.tree = t
		return err
	}
	return &exitError{code: exitFailed, err: err, tree: t}
}

// patchErrorRE is a target's error in one of its patches, as the engine
// writes it: the patch's index, without the sync file's line.
var patchErrorRE = regexp.MustCompile(`^target "[^"]*": patches\[([0-9]+)\]: `)

// placePatchErrors puts the sync file's line of the patch in front of the
// error of each target that failed in one of its patches, so that the
// error names the line (and shows it).
func placePatchErrors(sf *engine.SyncFile, res *engine.Result) {
	for _, t := range res.Targets {
		if t.Err == nil {
			continue
		}
		m := patchErrorRE.FindStringSubmatch(t.Err.Error())
		i := slices.IndexFunc(sf.Sync.Spec.Targets, func(s v1alpha1.Target) bool { return s.Name == t.Name })
		if m == nil || i < 0 {
			continue
		}
		if line := sf.Line(fmt.Sprintf("spec.targets[%d].patches[%s].patch", i, m[1])); line > 0 {
			t.Err = fmt.Errorf("%s:%d: %w", sf.Name, line, t.Err)
		}
	}
}

// readSyncFile reads and loads the sync file name, a regular file, within
// --timeout (see readUserFile).
func readSyncFile(ctx context.Context, timeout time.Duration, name string) (*engine.SyncFile, error) {
	b, err := readUserFile(ctx, timeout, name)
	if err != nil {
		return nil, err
	}
	return engine.LoadSyncFile(name, b)
}

// applySets sets --set KEY=VALUE in spec.params and in every target's
// params, so that the command line wins over both.
func applySets(spec *v1alpha1.ManifestSyncSpec, sets []string) error {
	if len(sets) == 0 {
		return nil
	}
	set := func(raw **runtime.RawExtension) error {
		params := map[string]any{}
		if *raw != nil && len((*raw).Raw) > 0 {
			// Numbers stay as written: a float64 would round integers
			// above 2^53.
			dec := json.NewDecoder(bytes.NewReader((*raw).Raw))
			dec.UseNumber()
			if err := dec.Decode(&params); err != nil {
				return err
			}
		}
		for _, kv := range sets {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usageErr("--set %q: want KEY=VALUE", kv)
			}
			keys := strings.Split(k, ".")
			if slices.Contains(keys, "") {
				return usageErr("--set %s: the key %q has an empty segment (want a or a.b.c)", kv, k)
			}
			var val any = ""
			if v != "" {
				docs, err := engine.DecodeDocuments([]byte(v))
				if err != nil || len(docs) != 1 {
					// A typo must not become a string param silently.
					return usageErr("--set %s: the value is not one YAML value (quote it to set a string: %s='\"...\"')", kv, k)
				}
				if lit := bigInteger([]byte(v)); lit != "" {
					return usageErr("--set %s: the integer %s does not fit in 64 bits (quote it to set a string)", kv, lit)
				}
				val = docs[0].Value
			}
			if err := setPath(params, keys, val); err != nil {
				return usageErr("--set %s: %v", kv, err)
			}
		}
		b, err := json.Marshal(params)
		if err != nil {
			return err
		}
		*raw = &runtime.RawExtension{Raw: b}
		return nil
	}
	if err := set(&spec.Params); err != nil {
		return err
	}
	for i := range spec.Targets {
		if spec.Targets[i].Params == nil {
			continue
		}
		if err := set(&spec.Targets[i].Params); err != nil {
			return err
		}
	}
	return nil
}

// intLiteral matches the plain YAML scalars that are integers, however
// large (yaml.v3 tags those beyond 64 bits as floats).
var intLiteral = regexp.MustCompile(`^[-+]?([0-9][0-9_]*|0[xX][0-9a-fA-F_]+|0[oO]?[0-7_]+)$`)

// bigInteger returns the first integer of a YAML value that does not fit
// in 64 bits, which decoding would turn into an inexact float, or "".
func bigInteger(value []byte) string {
	var n yaml3.Node
	if yaml3.Unmarshal(value, &n) != nil {
		return ""
	}
	var walk func(*yaml3.Node) string
	walk = func(n *yaml3.Node) string {
		if n.Kind == yaml3.ScalarNode && n.Style == 0 && intLiteral.MatchString(n.Value) {
			if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
				return n.Value
			}
		}
		for _, c := range n.Content {
			if lit := walk(c); lit != "" {
				return lit
			}
		}
		return ""
	}
	return walk(&n)
}

func setPath(m map[string]any, keys []string, v any) error {
	for i, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			if _, exists := m[k]; exists {
				return fmt.Errorf("%s is not an object", strings.Join(keys[:i+1], "."))
			}
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
	return nil
}

// writeResult prints every target that evaluated, or writes one file per
// target into --out-dir. Failed targets are left to the caller to report.
func writeResult(stdout io.Writer, res *engine.Result, f *evalFlags) error {
	if f.outDir != "" {
		if err := os.MkdirAll(f.outDir, 0o755); err != nil {
			return err
		}
	}
	if !f.showSecrets {
		res = maskedResult(res)
	}
	if f.output == "json" && f.outDir == "" {
		return writeJSON(stdout, res, res.Targets)
	}
	for _, t := range res.Targets {
		if t.Err != nil {
			continue
		}
		if f.outDir == "" {
			if err := writeYAML(stdout, t, true); err != nil {
				return err
			}
			continue
		}
		name := strings.ReplaceAll(targetDisplay(t), "/", "_")
		var out bytes.Buffer
		var err error
		if f.output == "json" {
			err = writeJSON(&out, res, []*engine.TargetResult{t})
		} else {
			err = writeYAML(&out, t, false)
		}
		if err != nil {
			return err
		}
		// Inside --out-dir only, and a regular file only: a checkout's
		// link out of it, or FIFO in it, is refused.
		if err := source.WriteFileIn(f.outDir, name+"."+f.output, out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// maskedResult is res with every object masked by res.Redactor for
// showing; digests stay those of the real objects.
func maskedResult(res *engine.Result) *engine.Result {
	out := *res
	out.Targets = make([]*engine.TargetResult, len(res.Targets))
	for i, t := range res.Targets {
		mt := *t
		mt.Objects = make([]*unstructured.Unstructured, len(t.Objects))
		for j, o := range t.Objects {
			mt.Objects[j] = &unstructured.Unstructured{Object: res.Redactor.Object(o.Object)}
		}
		out.Targets[i] = &mt
	}
	return &out
}

func targetDisplay(t *engine.TargetResult) string {
	return t.ID()
}

func writeYAML(w io.Writer, t *engine.TargetResult, header bool) error {
	var b strings.Builder
	if header {
		fmt.Fprintf(&b, "# target: %s\n", targetDisplay(t))
	}
	for _, o := range t.Objects {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

type jsonTarget struct {
	Name      string           `json:"name"`
	Namespace string           `json:"namespace,omitempty"`
	Cluster   string           `json:"cluster"`
	Digest    string           `json:"digest"`
	Objects   []map[string]any `json:"objects"`
	// Waves is the order the operator applies the objects in.
	Waves []jsonWave `json:"waves"`
}

// jsonWave is one wave of a target: its number and its objects, in apply
// order, as "Kind namespace/name".
type jsonWave struct {
	Wave    int      `json:"wave"`
	Objects []string `json:"objects"`
}

type jsonResult struct {
	Revision string          `json:"revision"`
	Inputs   v1alpha1.Inputs `json:"inputs"`
	Targets  []jsonTarget    `json:"targets"`
}

func writeJSON(w io.Writer, res *engine.Result, targets []*engine.TargetResult) error {
	out := jsonResult{Revision: res.Revision, Inputs: res.Inputs, Targets: []jsonTarget{}}
	for _, t := range targets {
		if t.Err != nil {
			continue
		}
		jt := jsonTarget{Name: t.Name, Namespace: t.Namespace, Cluster: t.Cluster, Digest: t.Digest, Objects: []map[string]any{}}
		for _, o := range t.Objects {
			jt.Objects = append(jt.Objects, o.Object)
		}
		waves, err := engine.Waves(t.Objects)
		if err != nil {
			return fmt.Errorf("target %q: %w", t.ID(), err)
		}
		jt.Waves = []jsonWave{}
		for _, w := range waves {
			jw := jsonWave{Wave: w.N, Objects: []string{}}
			for _, o := range w.Objects {
				jw.Objects = append(jw.Objects, v1alpha1.IDOf(o).String())
			}
			jt.Waves = append(jt.Waves, jw)
		}
		out.Targets = append(out.Targets, jt)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
