//go:build linux

package source

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusedWithin bounds a refusal. Reading a special file without the
// check does not end at all (a FIFO's open waits for a writer, /dev/zero
// never ends), so the bound only tells a refusal from a hang, with a wide
// margin for a loaded machine.
const refusedWithin = 10 * time.Second

// mkfifo makes a named pipe at p. Should a read block on it, the test's
// cleanup opens it for writing (O_RDWR never blocks), so that the reader
// returns and the test process can end.
func mkfifo(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	})
}

// mksocket makes a listening unix socket at p, closed at the end.
func mksocket(t *testing.T, p string) {
	t.Helper()
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// refused runs read, which must fail within refusedWithin with an error
// that names want and says what the file is.
func refused(t *testing.T, what string, read func() error, want, kind string) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- read() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s: read, want it refused", what)
			return
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), kind) {
			t.Errorf("%s: %v, want it to name %s and say %q", what, err, want, kind)
		}
		t.Logf("%s: refused in %v: %v", what, time.Since(start).Round(time.Microsecond), err)
	case <-time.After(refusedWithin):
		t.Errorf("%s: still reading after %v: it blocked", what, refusedWithin)
	}
}

// A hostile tree holds special files where sources are read: a FIFO named
// like a file (its open would block until a writer came), a socket, a
// link to /dev/zero (endless) and a device node. Every read of them is
// refused at once, naming the file and its kind; nothing is opened for
// reading but regular files.
func TestSpecialFilesRefused(t *testing.T) {
	root := t.TempDir()
	write(t, root, "ok.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n")
	mkfifo(t, filepath.Join(root, "fifo.yaml"))
	mksocket(t, filepath.Join(root, "sock.yaml"))
	if err := os.Symlink("/dev/zero", filepath.Join(root, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo.yaml", filepath.Join(root, "tofifo.yaml")); err != nil {
		t.Fatal(err)
	}
	// In a tree, and given by the user outside any tree (a sync file, a
	// values file), where a link to a device is refused as the device.
	for _, c := range []struct{ name, inTree, given string }{
		{"fifo.yaml", "not a regular file (named pipe)", "(named pipe)"},
		{"tofifo.yaml", "not a regular file (named pipe)", "(named pipe)"},
		{"sock.yaml", "not a regular file (socket)", "(socket)"},
		{"zero.yaml", "symlink resolves outside", "(character device)"},
	} {
		name, p := c.name, filepath.Join(root, c.name)
		refused(t, "ReadFile "+name, func() error { _, err := ReadFile(root, name); return err }, p, c.inTree)
		refused(t, "ObjectFileIn "+name, func() error { _, err := ObjectFileIn(root, name); return err }, p, c.inTree)
		refused(t, "WorkTree.Read "+name, func() error { _, err := (WorkTree{}).Read(root, name, false); return err }, p, c.inTree)
		refused(t, "ReadRegularFile "+name, func() error { _, err := ReadRegularFile(p); return err }, p, c.given)
	}
	var ne *NotRegularError
	if t.Failed() {
		return // a read blocked: another would block this test
	}
	if _, err := ReadFile(root, "fifo.yaml"); !errors.As(err, &ne) {
		t.Errorf("ReadFile fifo.yaml: %T, want *NotRegularError", err)
	}
	if b, err := ReadRegularFile(filepath.Join(root, "ok.yaml")); err != nil || !strings.Contains(string(b), "ConfigMap") {
		t.Errorf("a regular file: %q %v", b, err)
	}

	// A device node inside the tree (root only may make one).
	if os.Geteuid() == 0 {
		dev := filepath.Join(root, "dev.yaml")
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o644, 1<<8|5); err != nil { // 1,5: /dev/zero
			t.Fatal(err)
		}
		refused(t, "ReadFile dev.yaml", func() error { _, err := ReadFile(root, "dev.yaml"); return err }, dev, "(character device)")
		refused(t, "ReadRegularFile dev.yaml", func() error { _, err := ReadRegularFile(dev); return err }, dev, "(character device)")
	}
}

// A directory source with a special file inside, or a link to one, is
// refused naming it: it is not skipped, as a hidden file is, for it may
// be the file a script loads.
func TestDirRefusesSpecialFiles(t *testing.T) {
	for name, make := range map[string]func(t *testing.T, root string) string{
		"fifo": func(t *testing.T, root string) string {
			p := filepath.Join(root, "lib", "values.yaml")
			mkfifo(t, p)
			return p
		},
		"socket": func(t *testing.T, root string) string {
			p := filepath.Join(root, "app.sock")
			mksocket(t, p)
			return p
		},
		"link to a fifo": func(t *testing.T, root string) string {
			mkfifo(t, filepath.Join(root, ".pipe"))
			p := filepath.Join(root, "values.yaml")
			if err := os.Symlink(".pipe", p); err != nil {
				t.Fatal(err)
			}
			return p
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "a.yaml", "a")
			p := make(t, root)
			refused(t, "Dir", func() error { _, err := Dir(root, Limits{}); return err }, p, "not a regular file")
		})
	}
	// A hidden FIFO is skipped, as every hidden file is: never opened.
	root := t.TempDir()
	write(t, root, "a.yaml", "a")
	mkfifo(t, filepath.Join(root, ".git", "fifo"))
	if snap, err := Dir(root, Limits{}); err != nil || strings.Join(snap.Paths(), ",") != "a.yaml" {
		t.Errorf("a hidden FIFO: %v", err)
	}
}

// Where the CLI writes into a tree a checkout may hold (--out-dir, golden
// files), a link out of it cannot make it overwrite a file of the machine,
// and a FIFO or device cannot make the write block or go to the device.
func TestWriteFileInRefusesSpecialFiles(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "bashrc", "precious")
	root := t.TempDir()
	mkfifo(t, filepath.Join(root, "fifo.yaml"))
	for name, target := range map[string]string{
		"out.yaml":      filepath.Join(outside, "bashrc"),
		"dangling.yaml": filepath.Join(outside, "new"),
		"null.yaml":     "/dev/null",
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, kind := range map[string]string{
		"fifo.yaml":     "not a regular file (named pipe)",
		"out.yaml":      "symlink resolves outside",
		"dangling.yaml": "symlink resolves outside",
		"null.yaml":     "symlink resolves outside",
	} {
		refused(t, "WriteFileIn "+name, func() error { return WriteFileIn(root, name, []byte("x: 1\n"), 0o644) }, filepath.Join(root, name), kind)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "bashrc")); err != nil || string(b) != "precious" {
		t.Errorf("the file outside: %q %v, want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); err == nil {
		t.Error("a dangling link made a file outside the tree")
	}

	// A new file, in new directories, and a link inside the tree.
	if err := WriteFileIn(root, "a/b/new.yaml", []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, root, "real.yaml", "old")
	if err := os.Symlink("real.yaml", filepath.Join(root, "in.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileIn(root, "in.yaml", []byte("via link"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a/b/new.yaml": "new", "real.yaml": "via link"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", name, b, err, want)
		}
	}
}
