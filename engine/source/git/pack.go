package git

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
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
// bytes it has read, through a pipe; the returned reader ends with the
// limit's error.
func guardPack(r io.Reader, maxObject, maxTotal int64) *guardedPack {
	pr, pw := io.Pipe()
	g := &guardedPack{PipeReader: pr}
	go func() {
		err := checkPack(io.TeeReader(r, pw), maxObject, maxTotal)
		if errors.Is(err, ErrLimit) {
			g.limit.Store(&err)
		}
		pw.CloseWithError(err)
	}()
	return g
}

// guardedPack is a pack being checked.
type guardedPack struct {
	*io.PipeReader
	limit atomic.Pointer[error]
}

// limitErr stops the check (it ends once nothing reads what it hands on,
// or the response is closed) and returns the limit it found broken, if
// any: one found before the pack was read to its end is what ended it.
func (g *guardedPack) limitErr() error {
	g.Close()
	if err := g.limit.Load(); err != nil {
		return *err
	}
	return nil
}

// checkPack reads the pack r to its end, failing at the first object
// over a limit; r passes on every byte it reads.
func checkPack(r io.Reader, maxObject, maxTotal int64) error {
	sc := packfile.NewScanner(r)
	_, count, err := sc.Header()
	if err != nil {
		return passOn(r, err)
	}
	var total int64
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return passOn(r, err)
		}
		size := oh.Length
		var head deltaHead
		w := io.Writer(io.Discard)
		if oh.Type.IsDelta() {
			w = &head
		} else if err := checkSize(oh.Type, size, total, maxObject, maxTotal); err != nil {
			return err
		}
		if _, _, err := sc.NextObject(w); err != nil {
			return passOn(r, err)
		}
		if oh.Type.IsDelta() {
			if size, err = head.targetSize(); err != nil {
				return passOn(r, err)
			}
			if err := checkSize(plumbing.AnyObject, size, total, maxObject, maxTotal); err != nil {
				return err
			}
		}
		total += size
	}
	// The checksum and anything after it.
	_, err = io.Copy(io.Discard, r)
	return err
}

// passOn leaves a malformed pack to go-git, which says what is wrong with
// it: the rest of r is handed on as it is.
func passOn(r io.Reader, _ error) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// checkSize fails an object of size bytes over maxObject, or one that
// takes the pack's total over maxTotal.
func checkSize(t plumbing.ObjectType, size, total, maxObject, maxTotal int64) error {
	what := "an object"
	if t == plumbing.BlobObject {
		what = "a file (blob)"
	}
	if size > maxObject {
		return fmt.Errorf("%w: the server sent %s of %d bytes, over the limit of %d bytes a file", ErrLimit, what, size, maxObject)
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
