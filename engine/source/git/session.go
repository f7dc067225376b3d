package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
)

// session is one conversation with the remote's upload-pack: the refs it
// advertises are the ref listing, and at most one fetch follows on the
// same session, so that a poll that finds a new commit costs one listing
// and one fetch.
type session struct {
	sess transport.UploadPackSession
	adv  *packp.AdvRefs
	// maxObject and maxTotal bound the objects of a pack (guardPack).
	maxObject, maxTotal int64
}

// openSession connects to the remote and reads its refs.
func (f *Fetcher) openSession(ctx context.Context, j *job) (*session, error) {
	ep := *j.remote.ep
	c, err := f.transportFor(&ep, j.caBundle)
	if err != nil {
		return nil, err
	}
	sess, err := c.NewUploadPackSession(&ep, j.auth)
	if err != nil {
		return nil, err
	}
	adv, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		sess.Close()
		return nil, err
	}
	return &session{sess: sess, adv: adv, maxObject: f.opts.MaxFileBytes, maxTotal: f.opts.MaxCacheBytes}, nil
}

func (s *session) Close() error { return s.sess.Close() }

// listing returns the advertised refs.
func (s *session) listing() (listing, error) {
	refs, err := s.adv.AllReferences()
	if err != nil {
		return listing{}, err
	}
	peeled := make(map[plumbing.ReferenceName]plumbing.Hash, len(s.adv.Peeled))
	for name, h := range s.adv.Peeled {
		peeled[plumbing.ReferenceName(name)] = h
	}
	return listing{refs: refs, peeled: peeled}, nil
}

// supports reports whether the server advertised c.
func (s *session) supports(c capability.Capability) bool {
	return s.adv.Capabilities.Supports(c)
}

// fetch asks for wants and stores what the server sends into st. The tips
// of st's refs are offered as haves and a thin pack is asked for, so that
// only objects st lacks travel. With depth > 0 history is cut at that
// depth and st's shallow commits are updated; with depth 0, st must not be
// shallow.
func (s *session) fetch(ctx context.Context, st storage.Storer, wants []plumbing.Hash, depth int) error {
	req := packp.NewUploadPackRequestFromCapabilities(s.adv.Capabilities)
	req.Wants = wants
	if s.supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	if depth > 0 {
		if !s.supports(capability.Shallow) {
			return errors.New("the server does not support shallow fetches")
		}
		_ = req.Capabilities.Set(capability.Shallow)
		req.Depth = packp.DepthCommits(depth)
		shallow, err := st.Shallow()
		if err != nil {
			return err
		}
		req.Shallows = shallow
	}
	haves, err := refTips(st)
	if err != nil {
		return err
	}
	// A have that is also a want says nothing, and a request whose wants
	// are all haves is refused.
	req.Haves = slices.DeleteFunc(haves, func(h plumbing.Hash) bool { return slices.Contains(wants, h) })
	thin := len(req.Haves) > 0
	if thin {
		// go-git hides thin-pack from the advertised capabilities because
		// its Remote.Fetch cannot store thin packs on disk; every git
		// server supports it, and storePack resolves such packs.
		_ = req.Capabilities.Set(capability.ThinPack)
	}
	resp, err := s.sess.UploadPack(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Close()
	if err := updateShallow(st, resp.ShallowUpdate); err != nil {
		return err
	}
	pack := guardPack(demux(req, resp), s.maxObject, s.maxTotal)
	err = storePack(st, pack, thin)
	if lerr := pack.limitErr(ctx); lerr != nil {
		return lerr
	}
	return err
}

// refTips returns the hashes the refs of st point to.
func refTips(st storage.Storer) ([]plumbing.Hash, error) {
	iter, err := st.IterReferences()
	if err != nil {
		return nil, err
	}
	seen := map[plumbing.Hash]bool{}
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() != plumbing.HashReference || seen[ref.Hash()] {
			return nil
		}
		if _, err := st.EncodedObject(plumbing.AnyObject, ref.Hash()); err == nil {
			seen[ref.Hash()] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	tips := make([]plumbing.Hash, 0, len(seen))
	for h := range seen {
		tips = append(tips, h)
	}
	sort.Slice(tips, func(i, k int) bool { return tips[i].String() < tips[k].String() })
	return tips, nil
}

// updateShallow records the server's new shallow boundary.
func updateShallow(st storage.Storer, u packp.ShallowUpdate) error {
	if len(u.Shallows) == 0 && len(u.Unshallows) == 0 {
		return nil
	}
	cur, err := st.Shallow()
	if err != nil {
		return err
	}
	set := map[plumbing.Hash]bool{}
	for _, h := range append(cur, u.Shallows...) {
		set[h] = true
	}
	for _, h := range u.Unshallows {
		delete(set, h)
	}
	out := make([]plumbing.Hash, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].String() < out[k].String() })
	return st.SetShallow(out)
}

// demux strips the side-band framing of the response, if any.
func demux(req *packp.UploadPackRequest, r io.Reader) io.Reader {
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		return sideband.NewDemuxer(sideband.Sideband64k, r)
	case req.Capabilities.Supports(capability.Sideband):
		return sideband.NewDemuxer(sideband.Sideband, r)
	}
	return r
}

// storePack stores the objects of a pack. A thin pack holds deltas against
// objects it leaves out, so it is parsed object by object with st at hand
// to resolve them; a whole pack may be written as it is.
func storePack(st storage.Storer, r io.Reader, thin bool) error {
	var err error
	if thin {
		var p *packfile.Parser
		p, err = packfile.NewParserWithStorage(packfile.NewScanner(r), st)
		if err == nil {
			_, err = p.Parse()
		}
	} else {
		err = packfile.UpdateObjectStorage(st, r)
	}
	if errors.Is(err, packfile.ErrEmptyPackfile) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storing the pack: %w", err)
	}
	return nil
}
