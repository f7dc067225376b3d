// Package w7 is workload W7 of the benchmarks: engine diff --base over the
// examples. A git repository holds a copy of examples/ in one commit, and
// its working tree changes one example; `engine diff --base HEAD
// examples/` renders every ManifestSync at the commit and in the working
// tree and compares them. The baseline is what a CI job would otherwise
// run: two `engine eval` runs of every ManifestSync (one per side). The
// target: at most 2× the baseline's wall time. It needs no cluster.
package w7

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
)

const workload = "W7 diff"

// Run builds the engine from the module in the current directory (the
// repository's root, as make bench runs), sets up the repository and
// measures both, rounds times each, alternating.
func Run(ctx context.Context, rounds int) ([]harness.Row, []string, error) {
	dir, err := os.MkdirTemp("", "w7")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "engine")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/engine")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("%s: building engine: %w\n%s", workload, err, out)
	}
	repo := filepath.Join(dir, "repo")
	syncs, skipped, err := setup(ctx, repo)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", workload, err)
	}
	diffArgs := []string{"diff", "--base", "HEAD", "examples"}
	for _, s := range syncs {
		// examples/sops-secret's demo key decrypts its files, on both
		// sides, as eval gets it from its eval.args.
		if args := evalArgs(s); len(args) == 2 && args[0] == "--sops-age-key-file" {
			diffArgs = append(diffArgs, args...)
			break
		}
	}
	ours := func() (float64, error) {
		d, err := timed(ctx, repo, 1, bin, diffArgs...)
		return harness.Ms(d), err
	}
	twoEvals := func() (float64, error) {
		var total time.Duration
		for range 2 {
			for _, s := range syncs {
				d, err := timed(ctx, repo, 0, bin, append([]string{"eval", "-f", s}, evalArgs(s)...)...)
				if err != nil {
					return 0, err
				}
				total += d
			}
		}
		return harness.Ms(total), nil
	}
	runs, err := harness.Rounds(rounds, ours, twoEvals)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", workload, err)
	}
	metric := fmt.Sprintf("wall time over examples/ (%d ManifestSyncs, one changed)", len(syncs))
	row := harness.Compare(workload, metric, "ms", runs[0], runs[1], "two engine eval runs", "≤ 2× two engine eval runs",
		func(r float64) bool { return r <= 2 })
	var notes []string
	if len(skipped) > 0 {
		notes = append(notes, fmt.Sprintf("W7: left out of the copy of examples/: %s (an example that must fail to evaluate, or whose sync.yaml uses a field this build lacks, which diff reports as an error).", strings.Join(skipped, ", ")))
	}
	return []harness.Row{row}, notes, nil
}

// evalArgs are the flags examples/NAME/eval.args gives `engine eval` of
// the example (the namespaces of a namespaceSelector target), $DIR being
// the example's directory; none when it has none, or when they name git
// repositories ($GIT) that the examples test serves and W7 does not: those
// examples evaluate from their local copies.
func evalArgs(sync string) []string {
	dir := filepath.Dir(sync)
	raw, err := os.ReadFile(filepath.Join(dir, "eval.args"))
	if err != nil || strings.Contains(string(raw), "$GIT") {
		return nil
	}
	var args []string
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, f := range strings.Fields(line) {
			args = append(args, strings.ReplaceAll(f, "$DIR", dir))
		}
	}
	return args
}

// setup makes repo: a git repository whose one commit holds the examples
// that evaluate (those with an expected.err fail on purpose), and whose
// working tree changes the image of starlark-app. It returns the sync
// files, relative to repo, and the examples left out.
func setup(ctx context.Context, repo string) (syncs, skipped []string, err error) {
	examples, err := filepath.Glob("examples/*/sync.yaml")
	if err != nil || len(examples) == 0 {
		return nil, nil, fmt.Errorf("no examples/*/sync.yaml in %s (run from the repository's root): %v", mustGetwd(), err)
	}
	for _, s := range examples {
		ex := filepath.Dir(s)
		// An example that must fail is an error to diff.
		if _, err := os.Stat(filepath.Join(ex, "expected.err")); err == nil {
			skipped = append(skipped, filepath.Base(ex))
			continue
		}
		if err := os.CopyFS(filepath.Join(repo, ex), os.DirFS(ex)); err != nil {
			return nil, nil, err
		}
		syncs = append(syncs, s)
	}
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "examples"}} {
		if err := git(args...); err != nil {
			return nil, nil, err
		}
	}
	changed := filepath.Join(repo, "examples", "starlark-app", "sync.yaml")
	b, err := os.ReadFile(changed)
	if err != nil {
		return nil, nil, err
	}
	if !strings.Contains(string(b), "web:1.4.2") {
		return nil, nil, errors.New("examples/starlark-app/sync.yaml has no \"web:1.4.2\" to change")
	}
	if err := os.WriteFile(changed, []byte(strings.Replace(string(b), "web:1.4.2", "web:1.4.3", 1)), 0o644); err != nil {
		return nil, nil, err
	}
	return syncs, skipped, nil
}

// timed runs a command in dir, checks its exit status and returns its wall
// time.
func timed(ctx context.Context, dir string, wantExit int, name string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return 0, err
	}
	if code != wantExit {
		return 0, fmt.Errorf("%s %s: exit %d, want %d\n%s", filepath.Base(name), strings.Join(args, " "), code, wantExit, out)
	}
	return d, nil
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}
