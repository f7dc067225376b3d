package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/worker"
	"github.com/manifestsync/manifestsync/internal/objdiff"
	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/applier"
)

type diffFlags struct {
	evalFlags
	kubeconfig string
	context    string
	timeout    time.Duration
	instanceID string
	// base is the revision diff --base compares the working tree with.
	base   string
	output string
}

// clusterOnlyFlags are the flags of diff against a cluster, which --base
// does not take.
var clusterOnlyFlags = []string{"kubeconfig", "context", "instance-id", "request-timeout", "set", "target"}

func newDiffCmd() *cobra.Command {
	var f diffFlags
	cmd := &cobra.Command{
		Use:   "diff -f sync.yaml | diff --base REV [PATHS...]",
		Short: "Show what syncing a ManifestSync would change in a cluster, or what a change of the repository changes in every target",
		Long: `Show what syncing a ManifestSync would change in a cluster, or, with
--base, what the working tree changes in every target's objects against
a git revision.

The ManifestSync is evaluated locally, as eval does (same --source, --target
and --set), and every object is applied to the cluster as the operator
applies it, under the same resource policies, but as a server-side dry run:
nothing is written. For each object that would change, a unified diff
between the live object and the object as the apply would leave it is
printed (server-maintained fields and status left out); objects that would
be created or pruned, and conflicts, are listed too. Secret data is masked:
"***" where a value is unchanged, "*** (before)" and "*** (after)" where it
changes.

The cluster is that of --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
in its current context or --context. Without metadata.namespace, the
ManifestSync is in the context's namespace.

The evaluation runs in a worker process, bounded as in eval by
--max-memory and --timeout.

Exit status: 0 nothing would change, 1 something would, 2 error (bad flags,
unreadable input, failed evaluation or one stopped at a limit, unreachable
cluster, an object the API server would refuse).

diff --base REV [PATHS...] needs no cluster. It renders every ManifestSync
under PATHS (default "."; files and directories, found as engine vet finds
them, -f adding one more) twice: at the git revision REV of the repository
that holds them (a branch, a tag, a hash, HEAD~1: read from the
repository's objects, never checked out) and in the working tree. Each
side reads its sync files and the local copies of their sources (NAME/
or NAME.yaml beside the sync file) from its own tree; --source overrides
and git sources fetched as their spec says are the same on both sides,
as are --namespaces and --namespace (without them a namespaceSelector
target is rendered in one namespace made up to match it, as vet does).
ManifestSyncs are matched by file and namespace/name, targets by name
(and namespace), objects by kind, group, namespace and name; a
ManifestSync on one side only is all added or all removed. For each target that changed,
the objects added, removed and changed are printed as unified diffs
(base/TARGET/Kind namespace/name against worktree/...). Secret values
are masked as above, on both sides, as is every value of a Secret of
either side that other objects copy. Both sides evaluate in one worker,
bounded as eval's by --max-memory and, each evaluation, by --timeout.

-o text (default): the diffs, each target's led by a comment line.
-o markdown: a pull request comment: a table of the counts of each target
that changed, then a collapsed <details> section per target holding its
diff in a diff code block.
-o json: one object:
  {"base": REV, "commit": HASH,
   "syncs": [{"name", "namespace", "file",
              "status": "added"|"removed"|"changed"|"unchanged",
              "targets": [{"target", "added", "removed", "changed",
                           "error" (when it failed on either side),
                           "objects": [{"object": "Kind namespace/name",
                                        "group", "change": "added"|"removed"|"changed",
                                        "diff": UNIFIED-DIFF}]}]}],
   "errors": [MESSAGE]}
ManifestSyncs sorted by file and namespace/name, targets by name, objects
by kind, namespace and name.

Exit status with --base: 0 no change, 1 changes, 2 error (bad flags, a
revision or path not found, unreadable input, an evaluation or a target
that failed on either side, or one stopped at a limit).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.base != "" {
				for _, name := range clusterOnlyFlags {
					if cmd.Flags().Changed(name) {
						return usageErr("diff: --%s: diff --base compares two renders and takes no cluster flags", name)
					}
				}
				return runDiffBase(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, args)
			}
			if len(args) > 0 {
				return usageErr("diff: PATHS are for --base; a cluster diff takes -f sync.yaml")
			}
			if f.output != "text" || cmd.Flags().Changed("namespaces") || cmd.Flags().Changed("namespace") {
				return usageErr("diff: -o, --namespaces and --namespace are for --base")
			}
			return runDiff(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the ManifestSync file (required)")
	fl.StringArrayVar(&f.sources, "source", nil, "NAME=DIR|FILE|URL[@REF]: read source NAME from a local directory or file, or fetch it from Git (repeatable)")
	addSOPSKeyFlag(fl, &f.sopsKeyFile)
	fl.StringArrayVar(&f.targets, "target", nil, "diff only this target (repeatable)")
	fl.StringArrayVar(&f.sets, "set", nil, "KEY=VALUE: set a param for every target; KEY may be dotted (a.b.c), VALUE is YAML (repeatable)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, else ~/.kube/config")
	fl.StringVar(&f.context, "context", "", "kubeconfig context; default: the current one")
	fl.StringVar(&f.instanceID, "instance-id", "", "diff as the operator with this --instance-id would sync (its owner label and field manager)")
	fl.DurationVar(&f.timeout, "request-timeout", 30*time.Second, "limit of each request to the API server")
	fl.StringVar(&f.base, "base", "", "REV: compare the working tree with this git revision, offline, instead of a cluster with the ManifestSync")
	fl.StringVarP(&f.output, "output", "o", "text", "with --base: text, markdown or json")
	addNamespaceFlags(fl, &f.namespaces)
	addCapabilityFlags(fl, &f.caps)
	addLimitFlags(fl, &f.limits)
	addMaxMemoryFlag(fl, &f.maxMemory)
	return cmd
}

func runDiff(ctx context.Context, stdout, stderr io.Writer, f *diffFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.file == "" {
		return usageErr("diff: -f sync.yaml is required")
	}
	pool, stop, err := newSandbox("diff", f.maxMemory, f.limits.Timeout)
	if err != nil {
		return err
	}
	defer stop()
	if err := applier.ValidateInstanceID(f.instanceID); err != nil {
		return usageErr("diff: --instance-id: %v", err)
	}
	sf, err := readSyncFile(ctx, f.limits.Timeout, f.file)
	if err != nil {
		return usageErr("%w", err)
	}
	rules, err := kubeconfigRules("diff", f.kubeconfig)
	if err != nil {
		return err
	}
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := kc.ClientConfig()
	if err != nil {
		return kubeconfigErr("diff", err)
	}
	cfg.Timeout = f.timeout
	cfg.UserAgent = programName + "-diff/" + buildVersion()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return usageErr("diff: connecting to %s: %w", cfg.Host, err)
	}
	ms := sf.Sync.DeepCopy()
	if ms.Namespace == "" {
		if ms.Namespace, _, err = kc.Namespace(); err != nil {
			return kubeconfigErr("diff", err)
		}
	}
	res, err := evaluateForDiff(ctx, pool, c, sf, ms, f)
	if err != nil {
		return err
	}
	diffs, err := applier.DryRun(ctx, c, ms, res.Targets, applier.DiffOptions{InstanceID: f.instanceID})
	if err != nil {
		return usageErr("diff: %s: %w", cfg.Host, res.Redactor.Error(err))
	}
	objdiff.RedactDiffs(diffs, res.Redactor)
	return report(stdout, stderr, diffs, res.Redactor)
}

// evaluateForDiff evaluates the ManifestSync as eval does, but with the
// cluster's discovery for scopes and its namespaces for namespaceSelector
// targets, as the operator does. Every failure is an error (exit 2): there
// is nothing to compare.
func evaluateForDiff(ctx context.Context, pool *worker.Pool, c client.Client, sf *engine.SyncFile, ms *v1alpha1.ManifestSync, f *diffFlags) (*engine.Result, error) {
	if err := applySets(&ms.Spec, f.sets); err != nil {
		return nil, err
	}
	local := *sf
	local.Sync = ms
	rctx, timeout, cancel := readDeadline(ctx, f.limits.Timeout)
	defer cancel()
	snaps, err := readWithin(rctx, timeout, "reading its sources", func(ctx context.Context) (map[string]*engine.Snapshot, error) {
		return resolveSources(ctx, &local, f.sources, sopsKeys(f.sopsKeyFile))
	})
	if err != nil {
		return nil, usageErr("%s: %w", f.file, err)
	}
	opts := engine.Options{Limits: f.limits, Targets: f.targets, Scope: clusterScope(c.RESTMapper())}
	if err := f.caps.options("diff", &opts); err != nil {
		return nil, err
	}
	for _, t := range ms.Spec.Targets {
		if t.NamespaceSelector == nil {
			continue
		}
		if opts.Namespaces, err = applier.Namespaces(ctx, c); err != nil {
			return nil, usageErr("diff: %w", err)
		}
		break
	}
	res, err := pool.Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Snapshots: snaps, Name: ms.Name}, opts)
	if err, ok := killed(f.file, err); ok {
		return nil, err
	}
	if err != nil {
		return nil, usageErr("%s: %w", f.file, err)
	}
	if err := res.Err(); err != nil {
		return nil, usageErr("%w", err)
	}
	for _, t := range res.Targets {
		if t.Cluster != "in-cluster" {
			return nil, usageErr("target %q: cluster %q: diff compares only the targets of the kubeconfig's cluster; pick those with --target", t.ID(), t.Cluster)
		}
	}
	return res, nil
}

// clusterScope tells namespaced kinds from cluster-scoped ones by
// discovery, as the operator does, falling back to the built-in table.
func clusterScope(mapper apimeta.RESTMapper) engine.Scope {
	return func(gvk schema.GroupVersionKind) (bool, bool) {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return engine.BuiltinScope(gvk)
		}
		return m.Scope.Name() == apimeta.RESTScopeNameNamespace, true
	}
}

// report prints what would change, and a summary on stderr; nothing when
// nothing would. Its error carries the exit status. red masks the
// evaluation's Secret values wherever they show, in the names of targets
// and objects too (a transform may name an object after one).
func report(stdout, stderr io.Writer, diffs []applier.ObjectDiff, red *redact.Redactor) error {
	counts := map[applier.Action]int{}
	var b strings.Builder
	for _, d := range diffs {
		counts[d.Action]++
		target, object := red.String(d.Target), red.String(d.Describe())
		switch d.Action {
		case applier.ActionConflict:
			fmt.Fprintf(&b, "# %s: %s: conflict: %v\n", target, object, d.Err)
		case applier.ActionFailed:
			fmt.Fprintf(&b, "# %s: %s: would fail: %v\n", target, object, d.Err)
		case applier.ActionCreated, applier.ActionConfigured, applier.ActionPruned:
			fmt.Fprintf(&b, "# %s: %s: would be %s\n", target, object, strings.ToLower(string(d.Action)))
			if err := writeDiff(&b, target+"/"+object, d, red); err != nil {
				return err
			}
		}
	}
	if _, err := io.WriteString(stdout, b.String()); err != nil {
		return err
	}
	changed := counts[applier.ActionCreated] + counts[applier.ActionConfigured] + counts[applier.ActionPruned] + counts[applier.ActionConflict]
	if changed == 0 && counts[applier.ActionFailed] == 0 {
		return nil
	}
	fmt.Fprintf(stderr, "%d to create, %d to configure, %d to prune, %s, %d failing, %d unchanged\n",
		counts[applier.ActionCreated], counts[applier.ActionConfigured], counts[applier.ActionPruned],
		plural.Count(counts[applier.ActionConflict], "conflict"), counts[applier.ActionFailed], counts[applier.ActionUnchanged]+counts[applier.ActionSkipped])
	if counts[applier.ActionFailed] > 0 {
		return &exitError{code: exitUsage, err: errors.New("some objects would fail to apply")}
	}
	return &exitError{code: exitFailed, err: errors.New("")}
}

// writeDiff writes the unified diff of one object, YAML against YAML, with
// Secret data masked.
func writeDiff(w io.Writer, name string, d applier.ObjectDiff, red *redact.Redactor) error {
	return objdiff.Write(w, "live/"+name, "desired/"+name, d.Live, d.Desired, red)
}
