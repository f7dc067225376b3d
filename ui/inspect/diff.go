package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/internal/objdiff"
	"github.com/manifestsync/manifestsync/operator/applier"
)

// MaxDiffBytes bounds the unified diff of one object; past it the diff is
// cut with a last line saying so.
const MaxDiffBytes = 256 << 10

// Diff is what a sync of ms would do now, object by object: ms evaluated
// by eval (its sources fetched as its spec says, in-cluster inputs read
// through c), then every object applied as a server-side dry run through
// c, as `engine diff` does (applier.DryRun), instanceID being the
// operator's --instance-id. A target of another cluster
// (spec.targets[].cluster) is dry-run in that cluster, as the user: its
// kubeconfig Secret is read through c (a user who may not read it gets the
// API server's refusal on that target's row), its client built as
// applier.RemoteClientAs builds it (no files, no exec plugins), the
// objects to prune being the inventory entries of that cluster. A remote
// cluster that cannot be used, or does not answer within
// RemoteDiffTimeout, fails its own targets' rows only (Failed, with the
// reason). Secret values are masked in the diffs (***,
// *** (before), *** (after)), and every value the evaluation read of a
// Secret is masked wherever else it shows, errors included. Unchanged
// objects have no diff text.
func Diff(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync, eval Evaluator, instanceID string) ([]ObjectDiff, error) {
	if eval == nil {
		return nil, errors.New("no evaluator: the diff is not available")
	}
	res, err := eval.Evaluate(ctx, c, ms)
	if err != nil {
		return nil, err
	}
	if err := res.Err(); err != nil {
		return nil, res.Redactor.Error(err)
	}
	// Each cluster's targets are dry-run there: this cluster's through c,
	// a remote one's through a client built from its kubeconfig Secret as
	// the user reads it, all at once, so that an unreachable cluster costs
	// its own RemoteDiffTimeout only.
	groups := clusterGroups(ms, res.Targets)
	results := make([][]applier.ObjectDiff, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() {
			results[i], errs[i] = g.dryRun(ctx, c, ms, applier.DiffOptions{InstanceID: instanceID})
		})
	}
	wg.Wait()
	var out []ObjectDiff
	for i, g := range groups {
		switch {
		case errs[i] == nil:
			ods, err := objectDiffs(results[i], res.Redactor)
			if err != nil {
				return nil, err
			}
			out = append(out, ods...)
		case g.spec == nil: // this cluster: nothing to compare
			return nil, fmt.Errorf("dry run: %w", res.Redactor.Error(errs[i]))
		default: // a remote cluster fails its own targets only
			msg := res.Redactor.Error(errs[i]).Error()
			for _, t := range g.targets {
				out = append(out, ObjectDiff{Target: res.Redactor.String(t.ID()), Action: string(applier.ActionFailed), Error: msg})
			}
		}
	}
	return out, nil
}

// objectDiffs are the dry run's diffs as the page shows them, every
// Secret value red knows masked.
func objectDiffs(diffs []applier.ObjectDiff, red *redact.Redactor) ([]ObjectDiff, error) {
	objdiff.RedactDiffs(diffs, red)
	out := make([]ObjectDiff, 0, len(diffs))
	for _, d := range diffs {
		// A name may be a Secret's value too (a hostile transform's).
		od := ObjectDiff{Target: red.String(d.Target), Object: red.String(d.Describe()), Action: string(d.Action)}
		if d.Err != nil {
			od.Error = d.Err.Error()
		}
		switch d.Action {
		case applier.ActionCreated, applier.ActionConfigured, applier.ActionPruned:
			var b strings.Builder
			name := od.Target + "/" + od.Object
			if err := objdiff.Write(&b, "live/"+name, "desired/"+name, d.Live, d.Desired, red); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			od.Unified = cutDiff(b.String())
		}
		out = append(out, od)
	}
	return out, nil
}

// RemoteRequestTimeout bounds each request to a remote cluster of the
// diff; RemoteDiffTimeout bounds the whole dry run of one remote cluster's
// targets (reading its kubeconfig Secret included), so that an
// unreachable cluster fails its targets' rows in time.
var (
	RemoteRequestTimeout = 10 * time.Second
	RemoteDiffTimeout    = 30 * time.Second
)

// clusterGroup is the evaluated targets of one cluster of a ManifestSync.
type clusterGroup struct {
	// ref is the cluster as the inventory records it ("" for this one);
	// spec is its spec.targets[].cluster (nil for this one).
	ref     string
	spec    *v1alpha1.ClusterRef
	targets []*engine.TargetResult
}

// clusterGroups groups targets by cluster, this cluster's first, the
// others in the order of their first target.
func clusterGroups(ms *v1alpha1.ManifestSync, targets []*engine.TargetResult) []*clusterGroup {
	groups := []*clusterGroup{{}}
	byRef := map[string]*clusterGroup{"": groups[0]}
	for _, t := range targets {
		ref := applier.ClusterRefOf(ms, t)
		g := byRef[ref]
		if g == nil {
			g = &clusterGroup{ref: ref}
			for i := range ms.Spec.Targets {
				if st := &ms.Spec.Targets[i]; st.Name == t.Name && st.Cluster != nil {
					g.spec = st.Cluster
					break
				}
			}
			byRef[ref] = g
			groups = append(groups, g)
		}
		g.targets = append(g.targets, t)
	}
	if len(groups[0].targets) == 0 && len(groups) > 1 {
		groups = groups[1:] // no target here: no dry run here
	}
	return groups
}

// dryRun dry-runs g's targets as the user of c: through c for this
// cluster, else through the client of the cluster's kubeconfig Secret read
// through c (applier.RemoteClientAs: no files, no exec plugins), the
// inventory of ms read through c.
func (g *clusterGroup) dryRun(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync, opts applier.DiffOptions) ([]applier.ObjectDiff, error) {
	if g.spec == nil {
		return applier.DryRunCluster(ctx, c, c, "", ms, g.targets, opts)
	}
	ctx, cancel := context.WithTimeout(ctx, RemoteDiffTimeout)
	defer cancel()
	remote, err := applier.RemoteClientAs(ctx, ms, g.spec, c, RemoteRequestTimeout)
	if err != nil {
		return nil, err
	}
	diffs, err := applier.DryRunCluster(ctx, remote, c, g.ref, ms, g.targets, opts)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("cluster %q: no answer within %v: %w", g.spec.KubeConfigSecretRef.Name, RemoteDiffTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", g.spec.KubeConfigSecretRef.Name, err)
	}
	return diffs, nil
}

// cutDiff cuts a diff at MaxDiffBytes, at a line's end.
func cutDiff(text string) string {
	if len(text) <= MaxDiffBytes {
		return text
	}
	head := text[:MaxDiffBytes]
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	return head + fmt.Sprintf("# ... diff cut at %d KiB of %d KiB\n", MaxDiffBytes>>10, (len(text)+1023)>>10)
}
