package source

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Refs of git sources are read and written here, once: the URL[@REF] of
// an override, and the two ways a ref is shown.

// DescribeRef names a ref in messages and cache keys: branch "main",
// commit "4f2c0e8", HEAD.
func DescribeRef(ref v1alpha1.GitRef) string {
	switch {
	case ref.Commit != "":
		return "commit " + strconv.Quote(ref.Commit)
	case ref.SemVer != "":
		return "semver " + strconv.Quote(ref.SemVer)
	case ref.Tag != "":
		return "tag " + strconv.Quote(ref.Tag)
	case ref.Branch != "":
		return "branch " + strconv.Quote(ref.Branch)
	}
	return "HEAD"
}

// RefYAML shows a ref as it is written in a spec: {branch: main}, or
// "{} (the remote's HEAD)" for the empty ref.
func RefYAML(r v1alpha1.GitRef) string {
	var parts []string
	for _, p := range []struct{ k, v string }{{"branch", r.Branch}, {"tag", r.Tag}, {"semver", r.SemVer}, {"commit", r.Commit}} {
		if p.v != "" {
			parts = append(parts, p.k+": "+p.v)
		}
	}
	if len(parts) == 0 {
		return "{} (the remote's HEAD)"
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// IsGitURL reports whether an override names a remote repository rather
// than a local path.
func IsGitURL(p string) bool {
	return strings.Contains(p, "://") || scpLike.MatchString(p)
}

// scpLike matches the scp-like syntax of ssh remotes: user@host:path.
var scpLike = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// SplitRef splits URL@REF at the last "@" of the URL's path, so that the
// user of ssh://git@host/repo and git@host:repo is not taken for a ref.
func SplitRef(value string) (url, ref string) {
	pathStart := 0
	if i := strings.Index(value, "://"); i >= 0 {
		if j := strings.Index(value[i+3:], "/"); j >= 0 {
			pathStart = i + 3 + j
		} else {
			return value, ""
		}
	} else if loc := scpLike.FindStringIndex(value); loc != nil {
		pathStart = loc[1]
	}
	if i := strings.LastIndex(value[pathStart:], "@"); i >= 0 {
		return value[:pathStart+i], value[pathStart+i+1:]
	}
	return value, ""
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// ParseRef reads REF: tag:NAME, semver:RANGE, branch:NAME, commit:HASH, or
// a bare branch name or commit hash.
func ParseRef(ref string) (v1alpha1.GitRef, error) {
	kind, value, ok := strings.Cut(ref, ":")
	if !ok {
		if commitHash.MatchString(ref) {
			return v1alpha1.GitRef{Commit: ref}, nil
		}
		return v1alpha1.GitRef{Branch: ref}, nil
	}
	if value == "" {
		return v1alpha1.GitRef{}, fmt.Errorf("ref %q: empty %s", ref, kind)
	}
	switch kind {
	case "tag":
		return v1alpha1.GitRef{Tag: value}, nil
	case "semver":
		return v1alpha1.GitRef{SemVer: value}, nil
	case "branch":
		return v1alpha1.GitRef{Branch: value}, nil
	case "commit":
		if !commitHash.MatchString(value) {
			return v1alpha1.GitRef{}, fmt.Errorf("ref %q: a commit is 7 to 40 lowercase hex digits", ref)
		}
		return v1alpha1.GitRef{Commit: value}, nil
	}
	return v1alpha1.GitRef{}, fmt.Errorf("ref %q: want tag:, semver:, branch: or commit: (or a bare branch or commit)", ref)
}

// gitOverride makes the source an override URL[@REF] names: spec with
// another URL and, when given, another ref; its path stays.
func gitOverride(spec v1alpha1.GitSource, value string) (v1alpha1.GitSource, error) {
	url, ref := SplitRef(value)
	spec.URL = url
	if ref == "" {
		return spec, nil
	}
	r, err := ParseRef(ref)
	if err != nil {
		return spec, err
	}
	spec.Ref = r
	return spec, nil
}
