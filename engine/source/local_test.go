package source

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, name, data string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDir(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.yaml", "a")
	write(t, root, "lib/b.star", "b")
	write(t, root, ".git/config", "hidden")
	write(t, root, ".hidden.yaml", "hidden")
	snap, err := Dir(root, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snap.Paths(), ","); got != "a.yaml,lib/b.star" {
		t.Errorf("paths = %s", got)
	}
	if !strings.HasPrefix(snap.Revision, "sha256:") || snap.Origin != root {
		t.Errorf("revision %q origin %q", snap.Revision, snap.Origin)
	}
	again, _ := Dir(root, Limits{})
	if again.Revision != snap.Revision {
		t.Error("revision is not stable")
	}
	write(t, root, "a.yaml", "changed")
	if changed, _ := Dir(root, Limits{}); changed.Revision == snap.Revision {
		t.Error("revision did not change with the content")
	}
	if _, err := Dir(root, Limits{MaxFiles: 1}); err == nil || !strings.Contains(err.Error(), "more than 1 files") {
		t.Errorf("file limit: %v", err)
	}
	if _, err := Dir(root, Limits{MaxBytes: 3}); err == nil || !strings.Contains(err.Error(), "more than 3 bytes") {
		t.Errorf("byte limit: %v", err)
	}
}

func TestObjectFile(t *testing.T) {
	root := t.TempDir()
	write(t, root, "rv.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: s, resourceVersion: '9'}\n")
	write(t, root, "plain.yaml", "# comment\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n")
	write(t, root, "two.yaml", "apiVersion: v1\nkind: A\n---\napiVersion: v1\nkind: B\n")
	snap, err := ObjectFile(filepath.Join(root, "rv.yaml"))
	if err != nil || snap.Revision != "resourceVersion:9" || snap.Object["kind"] != "Secret" {
		t.Fatalf("rv.yaml: %v %+v", err, snap)
	}
	snap, err = ObjectFile(filepath.Join(root, "plain.yaml"))
	if err != nil || !strings.HasPrefix(snap.Revision, "sha256:") {
		t.Fatalf("plain.yaml: %v %+v", err, snap)
	}
	if _, err := ObjectFile(filepath.Join(root, "two.yaml")); err == nil || !strings.Contains(err.Error(), "holds 2 objects") {
		t.Errorf("two.yaml: %v", err)
	}
}

// TestSymlinks checks that nothing read from a local tree resolves outside
// it: a link out of the tree is an error that says "symlink" and names the
// file, and what it points at appears nowhere; a link inside still works.
func TestSymlinks(t *testing.T) {
	const token = "token-7f3a-must-not-leak"
	outside := t.TempDir()
	write(t, outside, "config", "apiVersion: v1\nkind: Config\nmetadata: {name: kc}\nusers: [{token: "+token+"}]\n")
	write(t, outside, "dir/x.yaml", token)

	root := t.TempDir()
	write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("a.yaml", "inside.yaml")
	link(filepath.Join(outside, "config"), "kc.yaml")
	link("../"+filepath.Base(outside)+"/config", "rel.yaml")
	link(filepath.Join(outside, "dir"), "outdir")
	link(filepath.Join(outside, "missing"), "dangling.yaml")

	noLeak := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if !strings.Contains(err.Error(), "symlink") || strings.Contains(err.Error(), token) {
			t.Errorf("%s: %v", what, err)
		}
		var se *SymlinkError
		if !errors.As(err, &se) {
			t.Errorf("%s: got %T, want *SymlinkError", what, err)
		}
	}
	for _, name := range []string{"kc.yaml", "rel.yaml", "dangling.yaml", "outdir/x.yaml"} {
		_, err := ReadFile(root, name)
		noLeak("ReadFile "+name, err)
		if err != nil && !strings.Contains(err.Error(), filepath.Join(root, name)) {
			t.Errorf("ReadFile %s: %v does not name the file", name, err)
		}
		_, err = ObjectFileIn(root, name)
		noLeak("ObjectFileIn "+name, err)
	}
	_, err := ObjectFile(filepath.Join(root, "kc.yaml"))
	noLeak("ObjectFile", err)
	_, err = Stat(root, "outdir")
	noLeak("Stat outdir", err)

	if b, err := ReadFile(root, "inside.yaml"); err != nil || !strings.Contains(string(b), "ConfigMap") {
		t.Errorf("a link inside the tree: %q %v", b, err)
	}
	if _, err := ReadFile(root, "nothing.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}

	// A directory source refuses the tree, naming the link.
	_, err = Dir(root, Limits{})
	noLeak("Dir", err)
	if err != nil && !strings.Contains(err.Error(), "dangling.yaml") && !strings.Contains(err.Error(), "kc.yaml") {
		t.Errorf("Dir: %v does not name the link", err)
	}
	for _, name := range []string{"kc.yaml", "rel.yaml", "dangling.yaml", "outdir"} {
		if err := os.Remove(filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Links inside the tree are read as their file; links to
	// directories are not followed.
	write(t, root, "sub/b.yaml", "b")
	link("sub", "subdir")
	snap, err := Dir(root, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snap.Paths(), ","); got != "a.yaml,inside.yaml,sub/b.yaml" {
		t.Errorf("paths = %s", got)
	}
	if string(snap.Files["inside.yaml"]) != string(snap.Files["a.yaml"]) {
		t.Error("inside.yaml is not a.yaml's content")
	}
}
