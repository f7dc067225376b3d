package git

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/storage"
)

// infiniteDepth is what git sends to deepen a shallow repository fully.
const infiniteDepth = 0x7fffffff

var errNoCommit = errors.New("no such commit")

// ensureRef returns the commit of a branch, tag or HEAD, fetching it with
// depth 1 unless the cache holds the commit the listing names.
func ensureRef(ctx context.Context, s *session, st storage.Storer, l listing, t target) (*object.Commit, error) {
	if c, err := object.GetCommit(st, t.commit); err == nil {
		return c, nil
	}
	tip, ok := l.hash(t.name)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrRefNotFound, t.name)
	}
	if err := fetchRefs(ctx, s, st, 1, map[plumbing.ReferenceName]plumbing.Hash{t.localName(): tip}); err != nil {
		return nil, err
	}
	return peel(st, tip)
}

// ensurePin returns a pinned commit: from the cache if it holds it, else
// by fetching the ref whose tip it is, else by asking for it by its full
// hash if the server allows that, else by fetching every branch and tag
// with full history.
func ensurePin(ctx context.Context, s *session, st storage.Storer, l listing, t target) (*object.Commit, error) {
	if c, err := findCommit(st, t.pin); !errors.Is(err, errNoCommit) {
		return c, err
	}
	var err error
	switch {
	case t.name != "":
		tip, _ := l.hash(t.name)
		err = fetchRefs(ctx, s, st, 1, map[plumbing.ReferenceName]plumbing.Hash{t.localName(): tip})
	case len(t.pin) == 40 && (s.supports(capability.AllowReachableSHA1InWant)):
		pin := plumbing.NewHash(t.pin)
		err = fetchRefs(ctx, s, st, 1, map[plumbing.ReferenceName]plumbing.Hash{"refs/pins/" + plumbing.ReferenceName(t.pin): pin})
		if err != nil && strings.Contains(err.Error(), "not our ref") {
			return nil, fmt.Errorf("%w: no branch or tag of the remote holds the commit: %w", ErrRefNotFound, err)
		}
	default:
		err = fetchAll(ctx, s, st, l)
	}
	if err != nil {
		return nil, err
	}
	c, err := findCommit(st, t.pin)
	if errors.Is(err, errNoCommit) {
		return nil, fmt.Errorf("%w: no branch or tag of the remote holds the commit", ErrRefNotFound)
	}
	return c, err
}

// fetchAll fetches every branch and tag with full history.
func fetchAll(ctx context.Context, s *session, st storage.Storer, l listing) error {
	refs := map[plumbing.ReferenceName]plumbing.Hash{}
	for name := range l.refs {
		if name.IsBranch() || name.IsTag() {
			if h, ok := l.hash(name); ok {
				refs[name] = h
			}
		}
	}
	shallow, err := st.Shallow()
	if err != nil {
		return err
	}
	depth := 0
	if len(shallow) > 0 {
		depth = infiniteDepth
	} else {
		// A complete cache holds the history of what it holds.
		maps.DeleteFunc(refs, func(_ plumbing.ReferenceName, h plumbing.Hash) bool {
			_, err := st.EncodedObject(plumbing.AnyObject, h)
			return err == nil
		})
		if len(refs) == 0 {
			return nil
		}
	}
	return fetchRefs(ctx, s, st, depth, refs)
}

// fetchRefs fetches the objects refs point to and then stores the refs,
// so that they are offered as haves by later fetches.
func fetchRefs(ctx context.Context, s *session, st storage.Storer, depth int, refs map[plumbing.ReferenceName]plumbing.Hash) error {
	wants := make([]plumbing.Hash, 0, len(refs))
	for _, h := range refs {
		if !slices.Contains(wants, h) {
			wants = append(wants, h)
		}
	}
	if len(wants) == 0 {
		return fmt.Errorf("%w: the remote has no branch or tag", ErrRefNotFound)
	}
	if err := s.fetch(ctx, st, wants, depth); err != nil {
		return fmt.Errorf("fetch: %w", classify(err))
	}
	for name, h := range refs {
		if err := st.SetReference(plumbing.NewHashReference(name, h)); err != nil {
			return err
		}
	}
	return nil
}

// findCommit finds a stored commit by its hash or a prefix of it.
func findCommit(st storage.Storer, pin string) (*object.Commit, error) {
	if len(pin) == len(plumbing.ZeroHash.String()) {
		c, err := object.GetCommit(st, plumbing.NewHash(pin))
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return nil, errNoCommit
		}
		return c, err
	}
	iter, err := st.IterEncodedObjects(plumbing.CommitObject)
	if err != nil {
		return nil, err
	}
	var found []plumbing.Hash
	err = iter.ForEach(func(o plumbing.EncodedObject) error {
		if strings.HasPrefix(o.Hash().String(), pin) {
			found = append(found, o.Hash())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, errNoCommit
	case 1:
		return object.GetCommit(st, found[0])
	}
	return nil, fmt.Errorf("commit %q is ambiguous: %d commits start with it", pin, len(found))
}

// peel follows annotated tags from h to a commit.
func peel(st storage.Storer, h plumbing.Hash) (*object.Commit, error) {
	for range 10 {
		obj, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", h, err)
		}
		switch obj.Type() {
		case plumbing.CommitObject:
			return object.DecodeCommit(st, obj)
		case plumbing.TagObject:
			tag, err := object.DecodeTag(st, obj)
			if err != nil {
				return nil, err
			}
			h = tag.Target
		default:
			return nil, fmt.Errorf("%s is a %s, not a commit", h, obj.Type())
		}
	}
	return nil, fmt.Errorf("%s: too many nested tags", h)
}
