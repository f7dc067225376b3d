package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStdlibDocsUpToDate: docs/stdlib.md and docs/stubs are what engine doc
// -o markdown and engine doc --stubs write for the stdlib of this tree (run
// make docs, or this test with -update, after changing a module's table).
func TestStdlibDocsUpToDate(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"doc", "-o", "markdown"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("engine doc -o markdown: exit %d: %s", code, stderr.String())
	}
	const md, stubs = "../../docs/stdlib.md", "../../docs/stubs"
	dir := t.TempDir()
	if code := run([]string{"doc", "--stubs", dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("engine doc --stubs: exit %d: %s", code, stderr.String())
	}
	if *update {
		if err := os.WriteFile(md, stdout.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if code := run([]string{"doc", "--stubs", stubs}, &stdout, &stderr); code != exitOK {
			t.Fatalf("engine doc --stubs: exit %d: %s", code, stderr.String())
		}
	}
	if b, err := os.ReadFile(md); err != nil || !bytes.Equal(b, stdout.Bytes()) {
		t.Errorf("%s is stale (%v): run make docs", md, err)
	}
	want, got := readDir(t, dir), readDir(t, stubs)
	if len(want) == 0 {
		t.Fatal("engine doc --stubs wrote nothing")
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s/%s is stale or missing: run make docs", stubs, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s/%s: no such module: run make docs", stubs, name)
		}
	}
}

// TestDocStubsRemovesGone: engine doc --stubs removes the stub of a module
// that no longer exists, and leaves other files alone.
func TestDocStubsRemovesGone(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"gone.py", "README.md"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"doc", "--stubs", dir}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	files := readDir(t, dir)
	if _, ok := files["gone.py"]; ok {
		t.Error("gone.py is still there")
	}
	for _, name := range []string{"README.md", "k8s.py", "__init__.py"} {
		if _, ok := files[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}
