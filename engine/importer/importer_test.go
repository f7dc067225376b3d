package importer

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const platformURL = "https://git.example.com/org/platform.git"

// load decodes the fixture files.
func load(t *testing.T, names ...string) []Object {
	t.Helper()
	var objs []Object
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		o, err := Decode(n, data)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// checkout is the fixture repository as a checkout of platformURL.
func checkout() map[string]fs.FS {
	return map[string]fs.FS{platformURL: os.DirFS(filepath.Join("testdata", "repo"))}
}

// output is what engine import writes of res: every ManifestSync with its
// header, then the findings of objects that gave none.
func output(t *testing.T, res *Result) string {
	t.Helper()
	var b bytes.Buffer
	for _, im := range res.Syncs {
		y, err := im.YAML()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	b.WriteString("--- findings of objects that gave no ManifestSync\n")
	for _, f := range res.Findings {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", p, got)
	}
}

// TestGolden imports the Flux and Argo CD fixtures, with the fixture
// repository as their checkout, and compares what is written with the
// golden files, reviewed by hand.
func TestGolden(t *testing.T) {
	for _, c := range []struct{ in, out string }{
		{"flux.yaml", "flux.golden.yaml"},
		{"argo.yaml", "argo.golden.yaml"},
		{"oci.yaml", "oci.golden.yaml"},
	} {
		t.Run(c.in, func(t *testing.T) {
			res, err := Import(load(t, c.in), Options{Repos: checkout()})
			if err != nil {
				t.Fatal(err)
			}
			got := output(t, res)
			golden(t, c.out, got)
			if strings.Contains(got, "never-printed") {
				t.Errorf("a Secret's data is in the output:\n%s", got)
			}
		})
	}
}
