package git

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// epoch is the time of the first commit of every test repository; each
// further commit is one minute later.
var epoch = time.Date(2024, 1, 2, 3, 4, 0, 0, time.UTC)

// testRepo is a bare repository, as servers publish it, with a work tree
// from which commits are pushed to it. The git CLI runs with no user or
// system configuration and a fixed clock, so hashes are reproducible.
type testRepo struct {
	t       *testing.T
	bare    string
	work    string
	home    string
	commits int
	// hashes maps commit labels (see seed) to hashes.
	hashes map[string]string
}

// newTestRepo creates root/name.git with no commits.
func newTestRepo(t *testing.T, root, name string) *testRepo {
	t.Helper()
	r := &testRepo{
		t:      t,
		bare:   filepath.Join(root, name+".git"),
		work:   filepath.Join(t.TempDir(), "work"),
		home:   t.TempDir(),
		hashes: map[string]string{},
	}
	r.git("", "init", "-q", "--bare", "-b", "main", r.bare)
	r.git("", "init", "-q", "-b", "main", r.work)
	r.git(r.work, "remote", "add", "origin", r.bare)
	return r
}

// seededRepo creates root/name.git holding:
//
//	main: c1 (tag v1.0.0) - m1 - c2 (v1.2.0, annotated) - c3 (v1.3.0-rc.1, annotated) - c4 (v2.0.0, latest)
//	dev:  c2 - d1
//
// m1 is the only commit that no ref points to.
//
// c1 adds README.md, deploy/app.yaml, deploy/.hidden, .github/ci.yaml, a
// symbolic link and a submodule; the later commits change deploy/app.yaml.
func seededRepo(t *testing.T, root, name string) *testRepo {
	t.Helper()
	r := newTestRepo(t, root, name)
	r.write(map[string]string{
		"README.md":       "# test\n",
		"deploy/app.yaml": "v: 1\n",
		"deploy/.hidden":  "hidden\n",
		".github/ci.yaml": "ci: true\n",
	})
	if err := os.Symlink("README.md", filepath.Join(r.work, "link")); err != nil {
		t.Fatal(err)
	}
	r.git(r.work, "add", "link")
	r.git(r.work, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("1", 40)+",vendor/sub")
	r.commit("c1", "first")
	r.tag("v1.0.0", false)
	r.change("m1", map[string]string{"deploy/app.yaml": "v: 1.1\n"})
	r.change("c2", map[string]string{"deploy/app.yaml": "v: 2\n"})
	r.tag("v1.2.0", true)
	r.git(r.work, "branch", "dev")
	r.change("c3", map[string]string{"deploy/app.yaml": "v: 3-rc\n"})
	r.tag("v1.3.0-rc.1", true)
	r.change("c4", map[string]string{"deploy/app.yaml": "v: 4\n"})
	r.tag("v2.0.0", false)
	r.tag("latest", false)
	r.git(r.work, "checkout", "-q", "dev")
	r.change("d1", map[string]string{"deploy/app.yaml": "dev\n"})
	r.git(r.work, "checkout", "-q", "main")
	r.git(r.work, "push", "-q", "origin", "main", "dev")
	r.git(r.work, "push", "-q", "origin", "--tags")
	return r
}

// env is the environment of the git CLI.
func (r *testRepo) env() []string {
	date := fmt.Sprintf("%d +0000", r.when().Unix())
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + r.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_COMMITTER_DATE=" + date,
	}
}

// when is the time of the next commit.
func (r *testRepo) when() time.Time { return epoch.Add(time.Duration(r.commits) * time.Minute) }

func (r *testRepo) git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = r.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// write writes files into the work tree and stages them.
func (r *testRepo) write(files map[string]string) {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
		r.git(r.work, "add", "--", name)
	}
}

// commit commits what is staged and records the hash under label.
func (r *testRepo) commit(label, msg string) string {
	r.t.Helper()
	r.git(r.work, "commit", "-q", "-m", msg)
	r.commits++
	h := r.git(r.work, "rev-parse", "HEAD")
	r.hashes[label] = h
	return h
}

// change writes files and commits them.
func (r *testRepo) change(label string, files map[string]string) string {
	r.t.Helper()
	r.write(files)
	return r.commit(label, label)
}

// push pushes the current branch of the work tree.
func (r *testRepo) push() {
	r.t.Helper()
	r.git(r.work, "push", "-q", "origin", "HEAD")
}

func (r *testRepo) tag(name string, annotated bool) {
	r.t.Helper()
	if annotated {
		r.git(r.work, "tag", "-a", "-m", "release "+name, name)
		return
	}
	r.git(r.work, "tag", name)
}

// commitTime is the committer time of the commit labelled label.
func (r *testRepo) commitTime(label string) time.Time {
	r.t.Helper()
	out := r.git(r.work, "show", "-s", "--format=%ct", r.hashes[label])
	var sec int64
	if _, err := fmt.Sscan(out, &sec); err != nil {
		r.t.Fatal(err)
	}
	return time.Unix(sec, 0).UTC()
}
