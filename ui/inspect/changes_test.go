package inspect

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// twoCommits makes the bare repository root/config.git whose main has two
// commits: the first with a.yaml, b.yaml, sub/c.yaml and sub/same.yaml;
// the second changing a.yaml and sub/c.yaml, deleting b.yaml and adding
// d.yaml. It returns both hashes.
func twoCommits(t *testing.T, root string) (first, second string) {
	t.Helper()
	work := gittest.TempDir(t)
	env := append(gittest.ServerEnv(t),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(files map[string]string) {
		t.Helper()
		for name, content := range files {
			p := filepath.Join(work, name)
			if content == "" {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(root, "init", "-q", "--bare", "-b", "main", "config.git")
	run(work, "init", "-q", "-b", "main")
	write(map[string]string{"a.yaml": "a: 1\n", "b.yaml": "b: 1\n", "sub/c.yaml": "c: 1\n", "sub/same.yaml": "same: 1\n"})
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "first")
	first = run(work, "rev-parse", "HEAD")
	write(map[string]string{"a.yaml": "a: 2\n", "b.yaml": "", "sub/c.yaml": "c: 2\n", "d.yaml": "d: 1\n"})
	run(work, "add", "-A")
	run(work, "commit", "-q", "-m", "second")
	second = run(work, "rev-parse", "HEAD")
	run(work, "push", "-q", filepath.Join(root, "config.git"), "main")
	return first, second
}

// The files changed between two history entries' commits of each git
// source, fetched from a loopback git daemon: the whole repository, and
// a source of one path, which lists only that path's files. A source
// that is not git, or that names a secretRef the user may not read (a
// hostile spec pointing at someone's Secret), gets a note, never the
// Secret's data.
func TestChanges(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t, nil)
	root := gittest.TempDir(t)
	first, second := twoCommits(t, root)
	url := gittest.Daemon(t, root) + "/config.git"
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}}},
			{Name: "sub", Git: &v1alpha1.GitSource{URL: url, Path: "sub"}},
			{Name: "cm", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}},
			{Name: "private", Git: &v1alpha1.GitSource{URL: url, SecretRef: &v1alpha1.LocalObjectReference{Name: "git-creds"}}},
		}},
	}
	entryAt := func(commit string) v1alpha1.HistoryEntry {
		return v1alpha1.HistoryEntry{Inputs: &v1alpha1.Inputs{Sources: map[string]string{
			"repo": "main@sha1:" + commit, "sub": "sha1:" + commit, "cm": "resourceVersion:1", "private": "sha1:" + commit}}}
	}
	ms.Status.History = []v1alpha1.HistoryEntry{entryAt(second), entryAt(first)}
	got, err := Changes(context.Background(), env.Client, ms, 1, 0, ChangesOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("changes %+v, want one per source", got)
	}
	files := func(sc SourceChange) string {
		var s []string
		for _, f := range sc.Files {
			s = append(s, f.Change+" "+f.Path)
		}
		return strings.Join(s, ", ")
	}
	if want := "Modified a.yaml, Deleted b.yaml, Added d.yaml, Modified sub/c.yaml"; files(got[0]) != want || got[0].Note != "" {
		t.Errorf("repo: %q (note %q), want %q", files(got[0]), got[0].Note, want)
	}
	if got[0].From != "main@sha1:"+first || got[0].To != "main@sha1:"+second {
		t.Errorf("repo: from %s to %s", got[0].From, got[0].To)
	}
	if want := "Modified c.yaml"; files(got[1]) != want {
		t.Errorf("sub: %q (note %q), want %q", files(got[1]), got[1].Note, want)
	}
	if got[2].Note != "not a git source" || got[2].Files != nil {
		t.Errorf("cm: %+v", got[2])
	}
	if !strings.Contains(got[3].Note, `secretRef `+ns+`/git-creds: secrets "git-creds" not found`) {
		t.Errorf("private: note %q, want the Secret's read error", got[3].Note)
	}

	// The same entry twice: nothing changed, nothing fetched.
	same, err := Changes(context.Background(), env.Client, ms, 0, 0, ChangesOptions{})
	if err != nil || len(same[0].Files) != 0 || same[0].Note != "" {
		t.Errorf("same entry: %+v, %v", same, err)
	}
	// At most MaxFiles listed, with a note.
	cut, err := Changes(context.Background(), env.Client, ms, 1, 0, ChangesOptions{CacheDir: t.TempDir(), MaxFiles: 2})
	if err != nil || len(cut[0].Files) != 2 || !strings.Contains(cut[0].Note, "4 files changed") {
		t.Errorf("MaxFiles 2: %+v, %v", cut[0], err)
	}
	if _, err := Changes(context.Background(), env.Client, ms, 0, 2, ChangesOptions{}); err == nil {
		t.Error("an entry out of range is no error")
	}
}

// A git server that never answers (a hostile or broken URL in the spec)
// holds a page no longer than ChangesOptions.Timeout: the source gets a
// note.
func TestChangesTimeout(t *testing.T) {
	env.Need(t)
	port := gittest.Blackhole(t)
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "git://127.0.0.1:" + strconv.Itoa(port) + "/x.git"}},
		}},
	}
	ms.Status.History = []v1alpha1.HistoryEntry{
		{Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "sha1:" + strings.Repeat("2", 40)}}},
		{Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "sha1:" + strings.Repeat("1", 40)}}},
	}
	start := time.Now()
	got, err := Changes(context.Background(), env.Client, ms, 1, 0, ChangesOptions{CacheDir: t.TempDir(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a timeout of 1s", took)
	}
	if got[0].Note == "" || len(got[0].Files) != 0 {
		t.Errorf("%+v: want a note", got[0])
	}
	t.Logf("note: %s", got[0].Note)
}
