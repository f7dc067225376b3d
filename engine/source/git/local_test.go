package git

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/manifestsync/manifestsync/engine/source"
)

// TestCommit reads the files of a commit of a repository on disk from its
// objects alone: what the working tree holds does not count, revisions
// resolve as git rev-parse resolves them, and hidden files, symbolic
// links, submodules and paths outside the repository are not read.
func TestCommit(t *testing.T) {
	r := seededRepo(t, t.TempDir(), "local")
	// The working tree differs from every commit.
	if err := os.WriteFile(filepath.Join(r.work, "deploy", "app.yaml"), []byte("v: work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.work, "deploy", "new.yaml"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for rev, want := range map[string]string{
		"HEAD":              "v: 4\n",
		"HEAD~1":            "v: 3-rc\n",
		"v1.2.0":            "v: 2\n", // an annotated tag, peeled
		"dev":               "dev\n",
		"main~4":            "v: 1\n",
		r.hashes["m1"][:10]: "v: 1.1\n",
	} {
		c, err := OpenCommit(filepath.Join(r.work, "deploy"), rev)
		if err != nil {
			t.Fatalf("%s: %v", rev, err)
		}
		b, err := c.ReadFile("deploy/app.yaml")
		if err != nil || string(b) != want {
			t.Errorf("%s: deploy/app.yaml = %q, %v; want %q", rev, b, err, want)
		}
	}
	c, err := OpenCommit(r.work, "main")
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash != r.hashes["c4"] {
		t.Errorf("main is %s, want %s", c.Hash, r.hashes["c4"])
	}
	files, err := c.Files(".")
	if err != nil {
		t.Fatal(err)
	}
	// No deploy/new.yaml (the working tree's), no hidden files, no link,
	// no submodule.
	if want := []string{"README.md", "deploy/app.yaml"}; !slices.Equal(files, want) {
		t.Errorf("Files(.) = %q, want %q", files, want)
	}
	snap, err := c.Dir("deploy", "main:deploy", source.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Files) != 1 || string(snap.Files["app.yaml"]) != "v: 4\n" || snap.FileName("app", "app.yaml") != "main:deploy/app.yaml" {
		t.Errorf("Dir(deploy) = %v (origin %q)", snap.Files, snap.Origin)
	}
	for _, p := range []string{"link", "vendor/sub", "deploy/new.yaml", "nothing"} {
		if _, err := c.IsDir(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("IsDir(%s): %v, want fs.ErrNotExist", p, err)
		}
	}
	if _, err := c.ReadFile("../outside"); err == nil {
		t.Error("ReadFile(../outside): no error")
	}
	if isDir, err := c.IsDir("deploy"); err != nil || !isDir {
		t.Errorf("IsDir(deploy) = %v, %v", isDir, err)
	}
	if rel, err := c.Rel(filepath.Join(r.work, "deploy", "app.yaml")); err != nil || rel != "deploy/app.yaml" {
		t.Errorf("Rel = %q, %v", rel, err)
	}
	// A path deleted from the working tree is still in the repository.
	if rel, err := c.Rel(filepath.Join(r.work, "gone", "sync.yaml")); err != nil || rel != "gone/sync.yaml" {
		t.Errorf("Rel(gone) = %q, %v", rel, err)
	}
	if _, err := c.Rel(filepath.Dir(r.work)); !errors.Is(err, ErrOutside) {
		t.Errorf("Rel(parent): %v, want ErrOutside", err)
	}
	if _, err := OpenCommit(r.work, "nosuch"); !errors.Is(err, ErrRefNotFound) {
		t.Errorf("OpenCommit(nosuch): %v, want ErrRefNotFound", err)
	}
	if _, err := OpenCommit(t.TempDir(), "HEAD"); err == nil {
		t.Error("OpenCommit outside a repository: no error")
	}
}
