package git

import (
	"fmt"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// listing is the remote's refs as a ref listing (ls-remote) shows them.
type listing struct {
	refs   map[plumbing.ReferenceName]*plumbing.Reference
	peeled map[plumbing.ReferenceName]plumbing.Hash // annotated tag -> commit
}

// hash returns the hash name points to, following a symbolic ref.
func (l listing) hash(name plumbing.ReferenceName) (plumbing.Hash, bool) {
	ref, ok := l.refs[name]
	if ok && ref.Type() == plumbing.SymbolicReference {
		ref, ok = l.refs[ref.Target()]
	}
	if !ok || ref.Type() != plumbing.HashReference {
		return plumbing.ZeroHash, false
	}
	return ref.Hash(), true
}

// commit returns the commit name points to according to the listing.
func (l listing) commit(name plumbing.ReferenceName) (plumbing.Hash, bool) {
	ref, ok := l.refs[name]
	if ok && ref.Type() == plumbing.SymbolicReference {
		name = ref.Target()
		ref, ok = l.refs[name]
	}
	if !ok || ref.Type() != plumbing.HashReference {
		return plumbing.ZeroHash, false
	}
	if h, ok := l.peeled[name]; ok {
		return h, true
	}
	return ref.Hash(), true
}

// names returns the sorted short names of the refs under prefix.
func (l listing) names(prefix string) []string {
	var out []string
	for name := range l.refs {
		if short, ok := strings.CutPrefix(name.String(), prefix); ok {
			out = append(out, short)
		}
	}
	sort.Strings(out)
	return out
}

// target is what a GitRef resolved to on the remote.
type target struct {
	// label starts the snapshot's revision; empty for a pinned commit.
	label string
	// name is the remote ref to fetch; empty for a pinned commit that is
	// no ref's tip.
	name plumbing.ReferenceName
	// commit is the commit according to the listing; zero when unknown.
	commit plumbing.Hash
	// pin is the pinned commit, or a prefix of it, in lower case.
	pin string
}

// revision formats a snapshot's revision for commit.
func (t target) revision(commit plumbing.Hash) string {
	if t.label == "" {
		return "sha1:" + commit.String()
	}
	return t.label + "@sha1:" + commit.String()
}

// localName is where a fetch of t stores the ref in the cache.
func (t target) localName() plumbing.ReferenceName {
	if t.name == plumbing.HEAD {
		return "refs/remotes/origin/HEAD"
	}
	return t.name
}

// resolve finds what ref stands for in the listing; when several fields are
// set the most specific wins: commit, semver, tag, branch.
func resolve(ref v1alpha1.GitRef, l listing) (target, error) {
	switch {
	case ref.Commit != "":
		return resolvePin(ref.Commit, l)
	case ref.SemVer != "":
		return resolveSemver(ref.SemVer, l)
	case ref.Tag != "":
		return resolveNamed(l, "refs/tags/", ref.Tag, "tags")
	case ref.Branch != "":
		return resolveNamed(l, "refs/heads/", ref.Branch, "branches")
	}
	return resolveHead(l)
}

func resolveNamed(l listing, prefix, short, kind string) (target, error) {
	short = strings.TrimPrefix(short, prefix)
	name := plumbing.ReferenceName(prefix + short)
	commit, ok := l.commit(name)
	if !ok {
		return target{}, fmt.Errorf("%w; the remote has %s %s", ErrRefNotFound, kind, few(l.names(prefix)))
	}
	return target{label: short, name: name, commit: commit}, nil
}

func resolveHead(l listing) (target, error) {
	head, ok := l.refs[plumbing.HEAD]
	if !ok {
		return target{}, fmt.Errorf("%w: the remote advertises no HEAD; the remote has branches %s",
			ErrRefNotFound, few(l.names("refs/heads/")))
	}
	commit, ok := l.commit(plumbing.HEAD)
	if !ok {
		return target{}, fmt.Errorf("%w: the remote's HEAD points to %s, which it does not advertise", ErrRefNotFound, head.Target())
	}
	name := plumbing.HEAD
	if head.Type() == plumbing.SymbolicReference {
		name = head.Target()
	}
	return target{label: "HEAD", name: name, commit: commit}, nil
}

// resolveSemver selects the tag with the highest version in the range.
// Tags may have a leading "v"; prereleases only match ranges that name one.
func resolveSemver(rng string, l listing) (target, error) {
	c, err := semver.NewConstraint(rng)
	if err != nil {
		return target{}, fmt.Errorf("invalid semver range: %w", err)
	}
	var best *semver.Version
	var bestName string
	for _, name := range l.names("refs/tags/") {
		v, err := semver.NewVersion(name)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, bestName = v, name
		}
	}
	if best == nil {
		return target{}, fmt.Errorf("%w: no tag matches the range; the remote has tags %s",
			ErrRefNotFound, few(l.names("refs/tags/")))
	}
	return resolveNamed(l, "refs/tags/", bestName, "tags")
}

// resolvePin checks a pinned commit and, when it is the tip of a ref,
// names that ref so that it can be fetched like one.
func resolvePin(commit string, l listing) (target, error) {
	pin := strings.ToLower(commit)
	if !isHexPin(pin) {
		return target{}, fmt.Errorf("commit %q is not 7 to 40 hexadecimal digits", commit)
	}
	t := target{pin: pin}
	names := make([]string, 0, len(l.refs))
	for name := range l.refs {
		names = append(names, name.String())
	}
	sort.Strings(names)
	for _, name := range names {
		h, ok := l.commit(plumbing.ReferenceName(name))
		if !ok || !strings.HasPrefix(h.String(), pin) {
			continue
		}
		if !t.commit.IsZero() && t.commit != h {
			return target{pin: pin}, nil // ambiguous among tips; look among all commits
		}
		if t.commit.IsZero() {
			t.name, t.commit = plumbing.ReferenceName(name), h
		}
	}
	return t, nil
}

func isHexPin(s string) bool {
	if len(s) < 7 || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// few lists names for a message, at most ten of them.
func few(names []string) string {
	const most = 10
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > most:
		return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
	}
	return strings.Join(names, ", ")
}
