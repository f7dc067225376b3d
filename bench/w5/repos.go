package w5

import (
	"github.com/manifestsync/manifestsync/bench/harness"

	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// docs is how many files of docsSize bytes each repository holds beside
// its manifest, outside the synced path: what a clone carries and an
// incremental fetch does not.
const (
	docs     = 50
	docsSize = 4 << 10
)

func repoName(i int) string { return fmt.Sprintf("repo-%03d", i) }

// manifest is the one object of repository i at revision rev.
func manifest(i, rev int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg-%s\ndata:\n  revision: %q\n", repoName(i), fmt.Sprint(rev))
}

// publish makes the bare repositories, workers at a time.
func (b *bench) publish() error {
	return harness.Parallel(sources, workers, func(i int) error {
		content := filepath.Join(b.dir, "content", repoName(i))
		if err := writeContent(content, i); err != nil {
			return err
		}
		b.works[i] = filepath.Join(b.dir, "work", repoName(i))
		if err := os.MkdirAll(b.works[i], 0o755); err != nil {
			return err
		}
		b.revs[i] = 1
		_, err := gittest.PublishDir(b.root, repoName(i), content, b.works[i])
		return err
	})
}

// writeContent writes repository i's files under dir: deploy/ holds its
// manifest, docs/ pseudo-random prose.
func writeContent(dir string, i int) error {
	if err := os.MkdirAll(filepath.Join(dir, "deploy"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "docs"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", "configmap.yaml"), []byte(manifest(i, 1)), 0o644); err != nil {
		return err
	}
	rnd := rand.New(rand.NewPCG(uint64(i), 5))
	words := []string{"source", "target", "namespace", "revision", "commit", "cluster", "object", "apply", "prune", "status", "the", "of", "and", "a", "to", "is"}
	for j := range docs {
		var s strings.Builder
		for s.Len() < docsSize {
			s.WriteString(words[rnd.IntN(len(words))])
			if rnd.IntN(12) == 0 {
				s.WriteString(".\n")
			} else {
				s.WriteByte(' ')
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "docs", fmt.Sprintf("page-%02d.md", j)), []byte(s.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// commit changes repository k's manifest and pushes it.
func (b *bench) commit(ctx context.Context, k int) error {
	b.revs[k]++
	tree := filepath.Join(b.works[k], "tree") // where PublishDir committed
	if err := os.WriteFile(filepath.Join(tree, "deploy", "configmap.yaml"), []byte(manifest(k, b.revs[k])), 0o644); err != nil {
		return err
	}
	bare := filepath.Join(b.root, repoName(k)+".git")
	for _, args := range [][]string{
		{"commit", "-q", "-am", fmt.Sprintf("revision %d", b.revs[k])},
		{"push", "-q", bare, "main"},
	} {
		if err := b.git(ctx, tree, args...); err != nil {
			return err
		}
	}
	return nil
}

// git runs git in dir without user or system configuration, bounded to a
// minute.
func (b *bench) git(ctx context.Context, dir string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + b.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=ManifestSync", "GIT_AUTHOR_EMAIL=bench@manifestsync.dev",
		"GIT_COMMITTER_NAME=ManifestSync", "GIT_COMMITTER_EMAIL=bench@manifestsync.dev",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
