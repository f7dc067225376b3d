package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/objdiff"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
)

// MaxDiffBytes bounds the unified diff of one object; past it the diff is
// cut with a last line saying so.
const MaxDiffBytes = 256 << 10

// Diff is what a sync of ms would do now, object by object: ms evaluated
// by eval (its sources fetched as its spec says, in-cluster inputs read
// through c), then every object applied as a server-side dry run through
// c, as `engine diff` does (controller.DryRun), instanceID being the
// operator's --instance-id. Secret values are masked in the diffs (***,
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
	// A remote cluster's targets are the operator's to read: c reaches
	// this cluster only.
	var out []ObjectDiff
	local := make([]*engine.TargetResult, 0, len(res.Targets))
	for _, t := range res.Targets {
		if t.Cluster != "" && t.Cluster != "in-cluster" {
			out = append(out, ObjectDiff{Target: t.ID(), Action: string(controller.ActionSkipped),
				Error: fmt.Sprintf("cluster %q: the diff compares only the targets of this cluster", t.Cluster)})
			continue
		}
		local = append(local, t)
	}
	diffs, err := controller.DryRun(ctx, c, ms, local, controller.Options{InstanceID: instanceID})
	if err != nil {
		return nil, fmt.Errorf("dry run: %w", res.Redactor.Error(err))
	}
	objdiff.RedactDiffs(diffs, res.Redactor)
	for _, d := range diffs {
		// A name may be a Secret's value too (a hostile transform's).
		od := ObjectDiff{Target: res.Redactor.String(d.Target), Object: res.Redactor.String(d.Describe()), Action: string(d.Action)}
		if d.Err != nil {
			od.Error = d.Err.Error()
		}
		switch d.Action {
		case controller.ActionCreated, controller.ActionConfigured, controller.ActionPruned:
			var b strings.Builder
			name := od.Target + "/" + od.Object
			if err := objdiff.Write(&b, "live/"+name, "desired/"+name, d.Live, d.Desired, res.Redactor); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			od.Unified = cutDiff(b.String())
		}
		out = append(out, od)
	}
	return out, nil
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
