package git

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// guardPack returns the pack r as it arrives, checked object by object
// before go-git stores it: every object's size is read from its header (a
// delta's from the size of what it makes, the second number of its
// header) and checked against maxObject before its content is let
// through, and the sizes of all objects together against maxTotal. A pack
// that breaks a limit is cut at that object's header, so that what is
// stored of it (go-git keeps every object of a pack in memory while it
// parses it) is a few kilobytes, not the hundreds of megabytes the header
// announces.
//
// The check reads the pack in its own goroutine and hands on only the
// bytes it has checked, through a pipe. Once it has cut the pack at a
// file over maxObject but within maxTotal, it reads on without handing
// anything on, to name that file: it hashes the blob (its content
// streamed through the hash, never kept) and finds it among the entries of
// the trees the pack holds (kept as names only). A blob over maxTotal is
// not read at all, and named by its size only.
func guardPack(r io.Reader, maxObject, maxTotal int64) *guardedPack {
	pr, pw := io.Pipe()
	g := &guardedPack{PipeReader: pr, done: make(chan struct{})}
	c := &packCheck{maxObject: maxObject, maxTotal: maxTotal, out: pw, names: map[plumbing.Hash]treeEntry{}}
	c.cut = func(err error) {
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		c.passing = false
		pw.CloseWithError(err)
	}
	c.passing = true
	go func() {
		defer close(g.done)
		err := c.run(r)
		if err != nil && errors.Is(err, ErrLimit) {
			g.mu.Lock()
			g.err = err
			g.mu.Unlock()
		}
		pw.CloseWithError(err)
	}()
	return g
}

// guardedPack is a pack being checked.
type guardedPack struct {
	*io.PipeReader
	done chan struct{}
	mu   sync.Mutex
	err  error // a limit broken, once found
}

// limitErr stops handing the pack on and returns the limit the check
// found broken, if any: that is what ended the pack. When it found one it
// is given until ctx ends to name the file, reading the rest of the pack.
func (g *guardedPack) limitErr(ctx context.Context) error {
	g.Close()
	g.mu.Lock()
	found := g.err
	g.mu.Unlock()
	if found == nil {
		return nil
	}
	select {
	case <-g.done:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// packCheck is the state of guardPack's reading.
type packCheck struct {
	maxObject, maxTotal int64
	out                 io.Writer
	passing             bool         // bytes read are kept, to be handed on
	pending             bytes.Buffer // read, not yet handed on
	released            int64        // the offset up to which the pack is handed on
	cut                 func(error)
	// names holds, for each entry of the trees read, the tree and name.
	names map[plumbing.Hash]treeEntry
	// over is the blob over maxObject, once hashed.
	over plumbing.Hash
}

type treeEntry struct {
	tree plumbing.Hash
	name string
}

// read returns r, keeping what is read of it until release hands it on.
func (c *packCheck) read(r io.Reader) io.Reader {
	return readerFunc(func(p []byte) (int, error) {
		n, err := r.Read(p)
		if n > 0 && c.passing {
			c.pending.Write(p[:n])
		}
		return n, err
	})
}

// release hands on what was read of the pack up to offset, which the
// check has passed: an object is handed on once the header of the next
// one is read, so go-git never sees an object before its check.
func (c *packCheck) release(offset int64) error {
	if !c.passing {
		return nil
	}
	n := int(offset - c.released)
	if n <= 0 {
		return nil
	}
	c.released = offset
	_, err := c.out.Write(c.pending.Next(n))
	return err
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// run reads the pack to its end, cutting it at the first object over a
// limit; a pack it cannot read is left to go-git, which says what is
// wrong with it.
func (c *packCheck) run(r io.Reader) error {
	in := c.read(r)
	sc := packfile.NewScanner(in)
	_, count, err := sc.Header()
	if err != nil {
		c.passing = false
		c.out.Write(c.pending.Bytes())
		_, err := io.Copy(c.out, r)
		return err // a pack go-git says is malformed
	}
	var total, after int64
	var limit error
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			break
		}
		if err := c.release(oh.Offset); err != nil {
			return err // go-git stopped reading
		}
		wasOver := limit != nil
		// The size in the header first (a delta's: of its data), before
		// any of the content is handed on.
		if limit == nil {
			if limit = checkSize(oh.Type, oh.Length, total, c.maxObject, c.maxTotal); limit != nil {
				c.cut(limit)
				if oh.Type != plumbing.BlobObject || !errors.Is(limit, errObjectTooLarge) || oh.Length > c.maxTotal {
					// Nothing to name, or a blob too large to read
					// even through a hash: it is not read at all.
					return limit
				}
			}
		}
		size, err := c.object(sc, oh)
		if err != nil {
			break
		}
		if limit == nil && oh.Type.IsDelta() {
			if limit = checkSize(plumbing.AnyObject, size, total, c.maxObject, c.maxTotal); limit != nil {
				c.cut(limit) // before what it makes is built
				return limit
			}
		}
		total += size
		if wasOver {
			// Past the limit, read on for the trees that name the
			// file, within a fetch's worth of content.
			if after += size; after > c.maxTotal {
				break
			}
		}
	}
	if limit == nil {
		// The last object, the checksum and anything after it.
		if err := c.release(c.released + int64(c.pending.Len())); err != nil {
			return err
		}
		_, err := io.Copy(c.out, r)
		return err
	}
	if p := c.path(c.over); p != "" {
		return fmt.Errorf("%w: file %s is %d bytes, over the limit of %d bytes a file (the server sent it)", ErrLimit, p, sizeOf(limit), c.maxObject)
	}
	return limit
}

// object reads the content of the object oh heads and returns its size:
// a tree's entries are kept, the blob over the limit hashed, a delta's
// first bytes read for the size of what it makes, anything else
// discarded.
func (c *packCheck) object(sc *packfile.Scanner, oh *packfile.ObjectHeader) (int64, error) {
	switch {
	case oh.Type.IsDelta():
		var head deltaHead
		if _, _, err := sc.NextObject(&head); err != nil {
			return 0, err
		}
		return head.targetSize()
	case oh.Type == plumbing.TreeObject && oh.Length <= c.maxObject:
		obj := &plumbing.MemoryObject{}
		obj.SetType(plumbing.TreeObject)
		if _, _, err := sc.NextObject(obj); err != nil {
			return 0, err
		}
		var tree object.Tree
		if err := tree.Decode(obj); err == nil {
			for _, e := range tree.Entries {
				if e.Mode == filemode.Dir || e.Mode.IsFile() {
					c.names[e.Hash] = treeEntry{tree: tree.Hash, name: e.Name}
				}
			}
		}
		return oh.Length, nil
	case oh.Type == plumbing.BlobObject && oh.Length > c.maxObject && c.over == (plumbing.Hash{}):
		h := plumbing.NewHasher(plumbing.BlobObject, oh.Length)
		if _, _, err := sc.NextObject(h); err != nil {
			return 0, err
		}
		c.over = h.Sum()
		return oh.Length, nil
	}
	_, _, err := sc.NextObject(io.Discard)
	return oh.Length, err
}

// path is where the trees read name h, from the outermost tree read.
func (c *packCheck) path(h plumbing.Hash) string {
	var p string
	for range 256 { // deeper than that is not a tree git makes
		e, ok := c.names[h]
		if !ok {
			return p
		}
		p = path.Join(e.name, p)
		h = e.tree
	}
	return p
}

// errObjectTooLarge marks checkSize's error for one object.
var errObjectTooLarge = errors.New("object too large")

// sizeError is checkSize's error for one object over the limit.
type sizeError struct {
	what        string
	size, limit int64
}

func (e *sizeError) Error() string {
	return fmt.Sprintf("%s: the server sent %s of %d bytes, over the limit of %d bytes a file", ErrLimit, e.what, e.size, e.limit)
}

func (e *sizeError) Is(target error) bool { return target == ErrLimit || target == errObjectTooLarge }

func sizeOf(err error) int64 {
	var se *sizeError
	if errors.As(err, &se) {
		return se.size
	}
	return 0
}

// checkSize fails an object of size bytes over maxObject, or one that
// takes the pack's total over maxTotal.
func checkSize(t plumbing.ObjectType, size, total, maxObject, maxTotal int64) error {
	what := "an object"
	if t == plumbing.BlobObject {
		what = "a file (blob)"
	}
	if size > maxObject {
		return &sizeError{what: what, size: size, limit: maxObject}
	}
	if total+size > maxTotal {
		return fmt.Errorf("%w: the server sent more than %d bytes of objects, over the limit of a fetch", ErrLimit, maxTotal)
	}
	return nil
}

// deltaHead keeps the first bytes of a delta, which give the sizes of its
// base and of what it makes; the rest is discarded.
type deltaHead struct {
	b []byte
}

func (d *deltaHead) Write(p []byte) (int, error) {
	if n := 20 - len(d.b); n > 0 {
		d.b = append(d.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

var errDeltaHeader = errors.New("malformed delta header")

// targetSize is the size of the object the delta makes: the second of
// the two variable-length numbers it starts with.
func (d *deltaHead) targetSize() (int64, error) {
	b := d.b
	for i := range 2 {
		var v int64
		var shift uint
		for {
			if len(b) == 0 || shift > 56 {
				return 0, errDeltaHeader
			}
			c := b[0]
			b = b[1:]
			v |= int64(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				break
			}
		}
		if i == 1 {
			return v, nil
		}
	}
	return 0, errDeltaHeader
}
