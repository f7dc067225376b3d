package source

import (
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

func TestSplitRef(t *testing.T) {
	for _, tc := range []struct{ in, url, ref string }{
		{"https://git.example.com/org/repo.git", "https://git.example.com/org/repo.git", ""},
		{"https://git.example.com/org/repo.git@main", "https://git.example.com/org/repo.git", "main"},
		{"https://user@git.example.com/repo.git@tag:v1.2.0", "https://user@git.example.com/repo.git", "tag:v1.2.0"},
		{"ssh://git@git.example.com/repo.git", "ssh://git@git.example.com/repo.git", ""},
		{"ssh://git@git.example.com/repo.git@branch:feature/x", "ssh://git@git.example.com/repo.git", "branch:feature/x"},
		{"git@github.com:org/repo.git", "git@github.com:org/repo.git", ""},
		{"git@github.com:org/repo.git@semver:>=1.2 <2", "git@github.com:org/repo.git", "semver:>=1.2 <2"},
		{"git://127.0.0.1:9418", "git://127.0.0.1:9418", ""},
	} {
		url, ref := SplitRef(tc.in)
		if url != tc.url || ref != tc.ref {
			t.Errorf("SplitRef(%q) = %q, %q; want %q, %q", tc.in, url, ref, tc.url, tc.ref)
		}
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want v1alpha1.GitRef
		err  string
	}{
		{in: "main", want: v1alpha1.GitRef{Branch: "main"}},
		{in: "release/1.x", want: v1alpha1.GitRef{Branch: "release/1.x"}},
		{in: "4f2c9a1", want: v1alpha1.GitRef{Commit: "4f2c9a1"}},
		{in: "tag:v1.2.0", want: v1alpha1.GitRef{Tag: "v1.2.0"}},
		{in: "semver:>=1.2 <2", want: v1alpha1.GitRef{SemVer: ">=1.2 <2"}},
		{in: "branch:4f2c9a1", want: v1alpha1.GitRef{Branch: "4f2c9a1"}},
		{in: "commit:xyz", err: "7 to 40 lowercase hex digits"},
		{in: "head:main", err: "want tag:, semver:, branch: or commit:"},
		{in: "tag:", err: "empty tag"},
	} {
		got, err := ParseRef(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRef(%q): error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
