package oci_test

import (
	"archive/tar"
	"path"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/oci"
)

// Whatever archive a publisher makes, Unpack returns only clean relative
// paths within the limits, or an error: never a path that leaves the
// directory, never a panic.
func FuzzUnpack(f *testing.F) {
	f.Add(tgz(f, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "a/b.yaml"}, body: "x"}))
	f.Add(tgz(f, entry{hd: tar.Header{Typeflag: tar.TypeReg, Name: "../x"}, body: "x"}))
	f.Add(tgz(f, entry{hd: tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/"}}))
	limits := oci.Limits{MaxFiles: 50, MaxUnpackedBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := oci.Unpack(b, limits)
		if err != nil {
			return
		}
		if len(files) > 50 {
			t.Fatalf("%d files", len(files))
		}
		total := 0
		for p, data := range files {
			total += len(data)
			if p == "" || path.Clean(p) != p || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\\") {
				t.Fatalf("path %q", p)
			}
		}
		if total > 1<<16 {
			t.Fatalf("%d bytes", total)
		}
	})
}

// The commands' references: a port is not a tag, no tag is latest, a
// digest is a digest.
func TestParseRef(t *testing.T) {
	for in, want := range map[string]string{
		"oci://127.0.0.1:5000/team/app:1.0.0":   "oci://127.0.0.1:5000/team/app tag=1.0.0",
		"oci://127.0.0.1:5000/team/app":         "oci://127.0.0.1:5000/team/app tag=latest",
		"oci://ghcr.io/org/app@sha256:0123abcd": "oci://ghcr.io/org/app digest=sha256:0123abcd",
	} {
		url, r, err := oci.ParseRef(in)
		got := url + " tag=" + r.Tag
		if r.Digest != "" {
			got = url + " digest=" + r.Digest
		}
		if err != nil || got != want {
			t.Errorf("ParseRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, _, err := oci.ParseRef("ghcr.io/org/app:1"); err == nil {
		t.Error("a reference without oci:// was taken")
	}
}
