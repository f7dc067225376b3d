package w5

import "testing"

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, path, protocol, body string
		want                         kind
	}{
		{"GET", "/repo-000.git/info/refs", "", "", kindListing},
		{"GET", "/repo-000.git/info/refs", "version=2", "", kindCaps},
		{"POST", "/repo-000.git/git-upload-pack", "version=2", "0014command=ls-refs\n0000", kindListing},
		{"POST", "/repo-000.git/git-upload-pack", "version=2", "0012command=fetch\n0001", kindFetch},
		{"POST", "/repo-000.git/git-upload-pack", "", "0032want 0123456789012345678901234567890123456789\n", kindFetch},
		{"GET", "/repo-000.git/HEAD", "", "", kindOther},
	} {
		if got := classify(c.method, c.path, c.protocol, []byte(c.body)); got != c.want {
			t.Errorf("%s %s %q: %v, want %v", c.method, c.path, c.body, got, c.want)
		}
	}
}
