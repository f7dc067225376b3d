package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

type tarFile struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	mtime    time.Time
	data     string
}

func readTar(t *testing.T, b []byte) []tarFile {
	t.Helper()
	var fs []tarFile
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: names or times that differ between machines: %+v", h.Name, h)
		}
		fs = append(fs, tarFile{h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime, string(data)})
	}
}

// TestTarLayerDeterministic: a layer's bytes depend on its entries alone,
// not on their order; parents are added, sorted, with the one mtime.
func TestTarLayerDeterministic(t *testing.T) {
	mtime := time.Unix(1764000000, 0)
	es := []entry{
		{Name: "/tmp", Dir: true, Mode: 0o1777},
		{Name: "etc/ssl/certs/ca.crt", Mode: 0o644, Data: []byte("CA")},
		{Name: "etc/passwd", Mode: 0o644, Data: []byte("root")},
		{Name: "home/nonroot", Dir: true, Mode: 0o700, UID: 65532, GID: 65532},
	}
	a, err := tarLayer(es, mtime)
	if err != nil {
		t.Fatal(err)
	}
	reversed := []entry{es[3], es[2], es[1], es[0]}
	b, err := tarLayer(reversed, mtime)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same entries in another order give other bytes")
	}
	later, err := tarLayer(es, mtime.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, later) {
		t.Error("another mtime gives the same bytes")
	}

	var got []string
	for _, f := range readTar(t, a) {
		if !f.mtime.Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", f.name, f.mtime, mtime)
		}
		got = append(got, f.name)
		switch f.name {
		case "tmp/":
			if f.typ != tar.TypeDir || f.mode != 0o1777 || f.uid != 0 {
				t.Errorf("tmp/: type %c mode %o uid %d, want a root directory 1777", f.typ, f.mode, f.uid)
			}
		case "home/nonroot/":
			if f.uid != 65532 || f.gid != 65532 || f.mode != 0o700 {
				t.Errorf("home/nonroot/: %d:%d mode %o, want 65532:65532 700", f.uid, f.gid, f.mode)
			}
		case "etc/passwd":
			if f.typ != tar.TypeReg || f.data != "root" || f.uid != 0 || f.gid != 0 {
				t.Errorf("etc/passwd: %+v", f)
			}
		}
	}
	want := "etc/ etc/passwd etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca.crt home/ home/nonroot/ tmp/"
	if g := strings.Join(got, " "); g != want {
		t.Errorf("entries:\n got %s\nwant %s", g, want)
	}
}

func TestTarLayerRejects(t *testing.T) {
	for name, es := range map[string][]entry{
		"outside the root": {{Name: "../etc/passwd", Data: []byte("x")}},
		"the root itself":  {{Name: "/", Dir: true}},
		"twice":            {{Name: "a", Data: []byte("1")}, {Name: "/a", Data: []byte("2")}},
		"under a file":     {{Name: "a", Data: []byte("1")}, {Name: "a/b", Data: []byte("2")}},
	} {
		if _, err := tarLayer(es, time.Unix(0, 0)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestBaseEntries: the nonroot user and group are 65532, /tmp is
// world-writable with the sticky bit, the CA bundle is the one given.
func TestBaseEntries(t *testing.T) {
	b, err := tarLayer(baseEntries(Base{CACerts: []byte("-----BEGIN CERTIFICATE-----\n")}), time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]tarFile{}
	for _, f := range readTar(t, b) {
		files[f.name] = f
	}
	if p := files["etc/passwd"].data; !strings.Contains(p, "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
		t.Errorf("etc/passwd has no nonroot user 65532:\n%s", p)
	}
	if g := files["etc/group"].data; !strings.Contains(g, "\nnonroot:x:65532:\n") {
		t.Errorf("etc/group has no nonroot group 65532:\n%s", g)
	}
	if ca := files["etc/ssl/certs/ca-certificates.crt"].data; ca != "-----BEGIN CERTIFICATE-----\n" {
		t.Errorf("CA bundle = %q", ca)
	}
	if f := files["tmp/"]; f.mode != 0o1777 {
		t.Errorf("tmp/ mode %o, want 1777", f.mode)
	}
	if f := files["home/nonroot/"]; f.uid != 65532 {
		t.Errorf("home/nonroot/ owned by %d, want 65532", f.uid)
	}
	if _, ok := files["usr/share/doc/ca-certificates/copyright"]; ok {
		t.Error("a copyright file without ca-certificates' notice")
	}
}
