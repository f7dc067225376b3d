package w6

// W12, what a change costs at run time: bin/engine of this tree against
// bin/engine built from an earlier commit (BaseRev), on the same control
// plane, alternating rounds. Issue 28 links the oci, http, cosign and SOPS
// providers into bin/engine and asks that a provider that is not used
// cost no memory; issue 29 asks the same rows of the lean operator. Rows:
// the binary's size; `engine operator` idle (no ManifestSync) a few
// seconds after its start; and W6's replication (one Secret to 1,000
// namespaces), its peak resident set and anonymous memory.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/internal/enginebuild"
)

const costWorkload = "W12 cost"

// BaseRev is the commit W12 builds its baseline bin/engine from (the
// flag -base of bench/run); empty skips W12.
var BaseRev string

// idleFor is how long an idle operator runs before its memory is read.
const idleFor = 5 * time.Second

// RunCost measures W12 on c, rounds times (at least 3).
func RunCost(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, []string, error) {
	if BaseRev == "" {
		return nil, nil, nil
	}
	dir, err := os.MkdirTemp("", "bench-w12-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	baseBin := filepath.Join(dir, "engine-base")
	rev, err := buildAt(ctx, c.Root, BaseRev, filepath.Join(dir, "tree"), baseBin)
	if err != nil {
		return nil, nil, fmt.Errorf("w12: %w", err)
	}
	b, err := setup(ctx, c, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("w12: %w", err)
	}
	baseline := "bin/engine at " + rev
	sizeOurs, sizeBase := fileMiB(b.engine), fileMiB(baseBin)
	rows := []harness.Row{harness.Compare(costWorkload, "the image's engine (lean: no evaluator linked) size on disk", "MiB", []float64{sizeOurs}, []float64{sizeBase}, baseline, "reported", nil)}

	// Idle: no ManifestSync; the operator starts, lists and watches.
	idle := func(bin string, side int) func() (float64, error) {
		return func() (float64, error) {
			args := []string{"operator", "--kubeconfig", c.Kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", harness.TrustAll}
			wait := func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(idleFor):
					return nil
				}
			}
			rss, _, err := b.measure(ctx, exec.Command(bin, args...), fmt.Sprintf("idle-%d-%d.log", side, len(b.anon[side])), wait, nil, side)
			return rss, err
		}
	}
	idleRuns, err := harness.Rounds(rounds, idle(b.engine, 0), idle(baseBin, 1))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("w12: %w", err), b.cleanup(ctx))
	}
	rows = append(rows,
		harness.Compare(costWorkload, fmt.Sprintf("`engine operator` idle, no ManifestSync: peak RSS over %s after start", idleFor+settle), "MiB", idleRuns[0], idleRuns[1], baseline, "reported", nil),
		harness.Compare(costWorkload, "`engine operator` idle: peak anonymous memory (RssAnon)", "MiB", b.anon[0], b.anon[1], baseline, "≤ 1.1× (an unused provider costs no memory)", func(q float64) bool { return q <= 1.1 }),
	)
	b.anon, b.file, b.pss = [4][]float64{}, [4][]float64{}, [4][]float64{}

	// W6's replication with either binary.
	sync := func(bin string, side int) func() (float64, error) {
		return func() (float64, error) {
			if err := b.reset(ctx); err != nil {
				return 0, err
			}
			ms := &v1alpha1.ManifestSync{
				ObjectMeta: metav1.ObjectMeta{Namespace: srcNamespace, Name: msName},
				Spec: v1alpha1.ManifestSyncSpec{
					Sources: []v1alpha1.Source{{Name: "src", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: srcName}}},
					Targets: []v1alpha1.Target{{Name: "all", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{targetLabel: "target"}}}},
				},
			}
			if err := b.client.Create(ctx, ms); err != nil {
				return 0, err
			}
			args := []string{"operator", "--kubeconfig", c.Kubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", harness.TrustAll}
			rss, _, err := b.measure(ctx, exec.Command(bin, args...), fmt.Sprintf("sync-%d-%d.log", side, len(b.anon[side])), b.waitSynced, nil, side)
			return rss, err
		}
	}
	syncRuns, err := harness.Rounds(rounds, sync(b.engine, 0), sync(baseBin, 1))
	if err != nil {
		return rows, nil, errors.Join(fmt.Errorf("w12: %w", err), b.cleanup(ctx))
	}
	rows = append(rows,
		harness.Compare(costWorkload, "W6's replication (1 Secret to 1,000 namespaces): peak RSS (operator + eval workers)", "MiB", syncRuns[0], syncRuns[1], baseline, "≤ 1.1×", func(q float64) bool { return q <= 1.1 }),
		harness.Compare(costWorkload, "W6's replication: peak anonymous memory (RssAnon)", "MiB", b.anon[0], b.anon[1], baseline, "≤ 1.1×", func(q float64) bool { return q <= 1.1 }),
	)
	wrows, wnotes, err := workerRows(ctx, filepath.Join(filepath.Dir(b.engine), "engine-worker"), baseBin, baseline, rounds)
	if err != nil {
		return rows, nil, errors.Join(fmt.Errorf("w12: %w", err), b.cleanup(ctx))
	}
	rows = append(rows, wrows...)
	notes := []string{fmt.Sprintf("W12: the image's engine (built with the tag leanoperator: no CUE, kustomize build or Helm template engine linked; they run in its engine-worker processes) is %d bytes, %+.2f MiB against %s's %d bytes.", fileBytes(b.engine), sizeOurs-sizeBase, rev, fileBytes(baseBin)),
		fmt.Sprintf("W12: the baseline is bin/engine built from commit %s (bench/run -base) in a git worktree of this repository, with the same Go toolchain and module cache; both binaries ran alternately on one control plane, %d rounds of each measure. The file-backed part of the resident set grows with the binary (its pages are mapped as they are touched), which is why the anonymous rows are the ones judged.", rev, max(rounds, 3))}
	return rows, append(notes, wnotes...), b.cleanup(ctx)
}

// fileBytes is the size of a file; 0 when it cannot be read.
func fileBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// buildAt builds ./cmd/engine of commit rev of the repository at root into
// out, through a detached worktree at tree that it removes; it returns
// the commit's short name.
func buildAt(ctx context.Context, root, rev, tree, out string) (string, error) {
	short, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", rev+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("base commit %s: %w (a shallow clone lacks it: fetch the history, or run with -base '')", rev, err)
	}
	name := string(short[:len(short)-1])
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", tree, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add %s: %w\n%s", rev, err, out)
	}
	defer exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run() //nolint:errcheck // a left worktree is pruned by git later
	// Built as this tree builds its own (enginebuild: as the image), so
	// that the rows compare code, not build settings.
	build := enginebuild.Command(ctx, tree, out)
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building bin/engine at %s: %w\n%s", name, err, b)
	}
	return name, nil
}
