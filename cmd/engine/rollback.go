package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/history"
)

type rollbackFlags struct {
	clusterFlags
	to   int
	undo bool
}

func newRollbackCmd() *cobra.Command {
	var f rollbackFlags
	cmd := &cobra.Command{
		Use:   "rollback NAME (--to N | --undo)",
		Short: "Pin a ManifestSync's git sources to an earlier revision, or undo that",
		Long: `Pin a ManifestSync's git sources to the commits of entry N of its
status.history (see engine history; 0 is the newest): each git source's
spec ref becomes {commit: HASH}, and the operator syncs that revision as it
syncs any change of the spec. The refs replaced are kept in the annotation
` + history.Annotation + `, so that --undo restores them (and
removes it); rolling back again keeps the refs of before the first
rollback.

The same works with kubectl alone: set spec.sources[].git.ref to
{commit: HASH}, taking HASH from .status.history[N].inputs.sources, and set
it back to undo.

Only the sources are pinned. An object source cannot be (its past content
is not stored), and a change of the spec itself (params, targets, an inline
transform) is not reverted; both are named in the output. A transform or
schemas read from a git source are restored with it.

The cluster is that of --kubeconfig, else $KUBECONFIG, else ~/.kube/config,
in its current context or --context.

Exit status: 0 done, 1 done but something could not be restored (see the
output), 2 error (bad flags, unreachable cluster, no such ManifestSync or
history entry, not rolled back for --undo).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRollback(cmd.Context(), cmd.OutOrStdout(), &f, args[0], cmd.Flags().Changed("to"))
		},
	}
	fl := cmd.Flags()
	f.add(fl)
	fl.IntVar(&f.to, "to", 0, "the history entry to go back to (0 is the newest)")
	fl.BoolVar(&f.undo, "undo", false, "restore the refs the rollbacks replaced")
	return cmd
}

func runRollback(ctx context.Context, stdout io.Writer, f *rollbackFlags, name string, toSet bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if toSet == f.undo {
		return usageErr("rollback: give exactly one of --to N and --undo")
	}
	if f.to < 0 {
		return usageErr("rollback: --to must be 0 or more")
	}
	c, key, err := f.client("rollback", name)
	if err != nil {
		return err
	}
	var res *history.Result
	if f.undo {
		res, err = history.Undo(ctx, c, key)
	} else {
		res, err = history.Rollback(ctx, c, key, f.to)
	}
	if err != nil {
		return notFound("rollback", key, err)
	}
	if res.Entry != nil {
		fmt.Fprintf(stdout, "ManifestSync %s: rolled back to entry %d (%s, %s)\n", key, f.to, res.Entry.Revision, res.Entry.Time.UTC().Format("2006-01-02T15:04:05Z"))
	} else {
		fmt.Fprintf(stdout, "ManifestSync %s: rollback undone\n", key)
	}
	if len(res.Changes) == 0 {
		fmt.Fprintln(stdout, "  no source changed")
	}
	for _, ch := range res.Changes {
		fmt.Fprintf(stdout, "  source %s: %s -> %s\n", ch.Source, source.RefYAML(ch.From), source.RefYAML(ch.To))
	}
	for _, n := range res.Notes {
		fmt.Fprintf(stdout, "  not restored: %s\n", n)
	}
	if !res.Complete() {
		return failed(fmt.Errorf("rollback: %s not restored", plural.Count(len(res.Notes), "input")))
	}
	return nil
}
