package harness

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident counts the pages of path in the page cache (mincore).
func resident(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m) //nolint:errcheck // a test's mapping
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A file just written (dirty) and then read is in the page cache; Evict
// leaves none of it there.
func TestEvict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bin")
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, path); n == 0 {
		t.Skip("this file system keeps no page cache of a file just written (tmpfs keeps it all, others none)")
	}
	if err := Evict(path); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, path); n != 0 {
		t.Errorf("%d pages of %s still in the page cache after Evict", n, path)
	}
	if err := Evict(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Evict of a missing file: no error")
	}
}
