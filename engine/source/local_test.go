package source

import (
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
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, filepath.Dir(outside), "secret", "s")
	if err := os.Symlink(outside, filepath.Join(root, "link.yaml")); err != nil {
		t.Fatal(err)
	}
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
