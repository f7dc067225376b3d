package main

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/health"
	"github.com/manifestsync/manifestsync/operator/view"
)

type statusFlags struct {
	clusterFlags
	output  string
	history int
	color   string
	// --shards, and where to find the replicas (status_shards.go).
	shards        bool
	operatorNS    string
	watchSelector string
}

func newStatusCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show ManifestSyncs, and one's objects per target, as the cluster has them",
		Long: `Without NAME, list the ManifestSyncs of the namespace of -n, or of every
namespace without it: whether each is Ready and why, its targets synced of
all, the revision applied, when it last synced, and the Ready message.

With NAME, show that ManifestSync (in the namespace of -n, else the
context's): its Ready condition, revision and inputs (the revision of
every source, digests of the transform, schemas and params), a tree of
the objects of each target with their state, and its last history
entries (see engine history). An object's state is Synced, Drifted
(someone changed it, and spec.policy.drift Report or Ignore left it so)
or Missing (someone deleted it, and the drift policy left it so); a target
is Synced, Failed, Conflict or Pending, with the message saying why.
Everything shown comes from the ManifestSync's status, but the health of
each object: that is read from the cluster and judged as the operator
judges it (kstatus, or the spec.healthChecks rule of its kind): Current,
InProgress, Failed, Terminating, NotFound or Unknown, with its message when
it is not Current. A target's health (Healthy, Progressing, Degraded,
Unknown) and the Healthy condition are the operator's.

With --shards, show the replicas of an operator run with --shards auto
(docs/sharding.md), from their Leases (manifestsync-shard-ID in
--operator-namespace): each one's holder, when it last renewed its Lease,
whether the Lease is live or expired (renewTime + leaseDurationSeconds
against the API server's clock: an estimate, since each replica's own
clock wrote renewTime), how many ManifestSyncs it owns
(shard.manifestsync.dev/owner=ID) and how many of those drain to another
(shard.manifestsync.dev/drain); which replica is the sharder (the holder
of the leader Lease manifestsync.dev, or of the one of
--watch-label-selector); and how many ManifestSyncs no replica owns yet.
The ManifestSyncs counted are those of -n, else of every namespace. It
needs permission to list leases (coordination.k8s.io) in the operator's
namespace and manifestsyncs (their metadata) where it counts them.

Objects are named "Kind namespace/name". Colours mark states when stdout is
a terminal, unless NO_COLOR is set or --color says otherwise. -o json
prints the same as a JSON document.

The cluster is that of --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
in its current context or --context.

Exit status: 0 shown, 2 error (bad flags, unreachable cluster, no such
ManifestSync).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStatus(cmd.Context(), cmd.OutOrStdout(), &f, args)
		},
	}
	fl := cmd.Flags()
	f.add(fl)
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	fl.IntVar(&f.history, "history", 5, "how many history entries to show with NAME")
	fl.StringVar(&f.color, "color", "auto", "colour states: auto (when stdout is a terminal and NO_COLOR is unset), always or never")
	fl.BoolVar(&f.shards, "shards", false, "show the replicas of an operator run with --shards auto, and their shares of the ManifestSyncs")
	fl.StringVar(&f.operatorNS, "operator-namespace", "manifestsync-system", "with --shards, the namespace of the operator's Leases (its --leader-election-namespace, else its own)")
	fl.StringVar(&f.watchSelector, "watch-label-selector", "", "with --shards, the operator's --watch-label-selector: names its leader Lease and the ManifestSyncs it shares")
	return cmd
}

func runStatus(ctx context.Context, stdout io.Writer, f *statusFlags, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.output != "text" && f.output != "json" {
		return usageErr("status: -o %q: want text or json", f.output)
	}
	if f.history < 0 {
		return usageErr("status: --history must be 0 or more")
	}
	opts, err := f.textOptions(stdout)
	if err != nil {
		return err
	}
	if f.shards {
		return runStatusShards(ctx, stdout, f, args)
	}
	name := ""
	if len(args) == 1 {
		name = args[0]
	}
	allNamespaces := name == "" && f.namespace == ""
	c, key, err := f.client("status", name)
	if err != nil {
		return err
	}
	if name == "" {
		if allNamespaces {
			key.Namespace = ""
		}
		return statusList(ctx, stdout, c, key.Namespace, f.output, opts)
	}
	ms := &v1alpha1.ManifestSync{}
	if err := c.Get(ctx, key, ms); err != nil {
		return notFound("status", key, err)
	}
	d, err := view.Describe(ms, f.history)
	if err != nil {
		return err
	}
	judgeObjects(ctx, c, ms, &d)
	if f.output == "json" {
		return printJSON(stdout, d)
	}
	return view.WriteDetail(stdout, d, opts)
}

// statusList shows every ManifestSync of namespace, of every namespace
// when it is "".
func statusList(ctx context.Context, stdout io.Writer, c client.Client, namespace, output string, opts view.Options) error {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return usageErr("status: listing ManifestSyncs: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.ManifestSync) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	items := make([]view.Summary, len(list.Items))
	for i := range list.Items {
		items[i] = view.Summarize(&list.Items[i])
	}
	if output == "json" {
		return printJSON(stdout, view.List{Items: items})
	}
	return view.WriteTable(stdout, items, opts)
}

// textOptions colour the output when --color says so or, by default,
// when stdout is a terminal and NO_COLOR is unset (no-color.org).
func (f *statusFlags) textOptions(stdout io.Writer) (view.Options, error) {
	opts := view.Options{MessageWidth: 80}
	switch f.color {
	case "always":
		opts.Color = true
	case "never":
	case "auto":
		file, ok := stdout.(*os.File)
		opts.Color = ok && term.IsTerminal(int(file.Fd())) && os.Getenv("NO_COLOR") == ""
	default:
		return opts, usageErr("status: --color %q: want auto, always or never", f.color)
	}
	return opts, nil
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// judgeObjects sets the health of the objects of d's in-cluster targets,
// read from the API server and judged as the operator judges them (kstatus,
// or the rule of spec.healthChecks). Those of remote clusters are not
// judged: their kubeconfig is the operator's to read.
func judgeObjects(ctx context.Context, c client.Reader, ms *v1alpha1.ManifestSync, d *view.Detail) {
	checker, _ := health.New(ms.Spec.HealthChecks)
	d.Judge(func(t view.Target, o view.Object) (string, string, bool) {
		if t.Cluster != "" && t.Cluster != "in-cluster" {
			return "", "", false
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(schema.GroupVersionKind{Group: o.Group, Version: o.Version, Kind: o.Kind})
		err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, obj)
		var res health.Result
		switch {
		case apierrors.IsNotFound(err):
			res = checker.Check(nil)
		case err != nil:
			res = health.Result{Status: health.Unknown, Message: err.Error()}
		default:
			res = checker.Check(obj)
		}
		return string(res.Status), res.Message, true
	})
}
