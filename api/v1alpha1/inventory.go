package v1alpha1

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxInventoryJSON bounds the decompressed size of status.inventoryGzip,
// so that a status written by someone else cannot make its readers
// inflate a zip bomb.
const MaxInventoryJSON = 64 << 20

// InventoryEntries is the inventory of ms's status, from either form
// (status.inventory or status.inventoryGzip). A corrupt inventoryGzip is
// an error, never an empty inventory.
func (ms *ManifestSync) InventoryEntries() ([]InventoryEntry, error) {
	entries := []InventoryEntry{}
	if len(ms.Status.InventoryGzip) == 0 {
		return ms.Status.Inventory, nil
	}
	err := ms.EachInventoryEntry(func(e InventoryEntry) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// EachInventoryEntry calls fn with each entry of ms's inventory, in
// order, and stops at fn's first error, which it returns. A gzipped
// inventory is read as a stream: a large one (tens of thousands of
// entries) is never held whole, in its JSON or as entries. A corrupt
// inventoryGzip is an error, found after fn has seen the entries before
// the corruption: a caller that must not act on part of an inventory
// reads it through once first.
func (ms *ManifestSync) EachInventoryEntry(fn func(InventoryEntry) error) error {
	if len(ms.Status.InventoryGzip) == 0 {
		for _, e := range ms.Status.Inventory {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	}
	if len(ms.Status.Inventory) > 0 {
		return fmt.Errorf("ManifestSync %s/%s: both status.inventory and status.inventoryGzip are set", ms.Namespace, ms.Name)
	}
	var fnErr error
	err := decodeInventory(ms.Status.InventoryGzip, MaxInventoryJSON, func(e InventoryEntry) bool {
		fnErr = fn(e)
		return fnErr == nil
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return fmt.Errorf("ManifestSync %s/%s: status.inventoryGzip: %w", ms.Namespace, ms.Name, err)
	}
	return nil
}

// gzipErr remembers the error of the gzip stream under a JSON decoder, to
// tell a corrupt gzip from JSON that is not an inventory.
type gzipErr struct {
	r   io.Reader
	err error
}

func (g *gzipErr) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err != nil && err != io.EOF {
		g.err = err
	}
	return n, err
}

// decodeInventory reads a gzipped JSON array of entries of at most limit
// bytes, one entry at a time, until each returns false.
func decodeInventory(gz []byte, limit int64, each func(InventoryEntry) bool) error {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return fmt.Errorf("not gzip: %w", err)
	}
	limited := &io.LimitedReader{R: zr, N: limit + 1}
	src := &gzipErr{r: limited}
	dec := json.NewDecoder(src)
	fail := func(err error) error {
		switch {
		case limited.N <= 0:
			return fmt.Errorf("more than %d bytes decompressed: refused", limit)
		case src.err != nil:
			return fmt.Errorf("corrupt gzip: %w", src.err)
		}
		return fmt.Errorf("not a JSON array of entries: %w", err)
	}
	// end reads to the end of the stream, which must hold nothing more:
	// the gzip checksum and the limit are checked there.
	end := func() error {
		switch tok, err := dec.Token(); {
		case errors.Is(err, io.EOF) && limited.N > 0:
			return nil
		case err != nil:
			return fail(err)
		default:
			return fail(fmt.Errorf("%v after the array", tok))
		}
	}
	open, err := dec.Token()
	if err != nil {
		return fail(err)
	}
	if open == nil { // null: no entries
		return end()
	}
	if open != json.Delim('[') {
		return fail(fmt.Errorf("starts with %v", open))
	}
	for dec.More() {
		var e InventoryEntry
		if err := dec.Decode(&e); err != nil {
			return fail(err)
		}
		if !each(e) {
			return nil
		}
	}
	if _, err := dec.Token(); err != nil { // the closing ]
		return fail(err)
	}
	return end()
}

// SetInventory writes entries to the status: as status.inventory when
// their JSON is at most threshold bytes, else gzipped as
// status.inventoryGzip with status.inventoryCount. On an error the status
// is left as it was.
func (s *ManifestSyncStatus) SetInventory(entries []InventoryEntry, threshold int) error {
	w := NewInventoryWriter(threshold)
	for _, e := range entries {
		w.Add(e)
	}
	return w.Close(s)
}

// InventoryWriter writes an inventory into a status one entry at a time,
// in the form SetInventory chooses, without holding its entries or their
// JSON once it is larger than the threshold: they go through gzip as they
// come.
// +kubebuilder:object:generate=false
type InventoryWriter struct {
	threshold int
	entries   []InventoryEntry // while the JSON is at most threshold bytes
	json      bytes.Buffer     // "[" and the entries so far, until gzip takes over
	gz        bytes.Buffer
	zw        *gzip.Writer
	n         int
	err       error
}

// NewInventoryWriter writes an inventory whose JSON, when larger than
// threshold bytes, is gzipped.
func NewInventoryWriter(threshold int) *InventoryWriter {
	w := &InventoryWriter{threshold: threshold}
	w.json.WriteByte('[')
	return w
}

// Add writes the next entry.
func (w *InventoryWriter) Add(e InventoryEntry) {
	if w.err != nil {
		return
	}
	raw, err := json.Marshal(e)
	if err != nil {
		w.err = err
		return
	}
	if w.n > 0 {
		w.json.WriteByte(',')
	}
	w.json.Write(raw)
	w.n++
	if w.zw == nil {
		w.entries = append(w.entries, e)
		if w.json.Len()+1 <= w.threshold {
			return
		}
		// Too large to stay plain: from here on, gzipped as it comes.
		w.entries = nil
		if w.zw, w.err = gzip.NewWriterLevel(&w.gz, gzip.BestCompression); w.err != nil {
			return
		}
	}
	_, w.err = w.json.WriteTo(w.zw)
}

// Close ends the inventory and writes it to s; on an error s is left as
// it was.
func (w *InventoryWriter) Close(s *ManifestSyncStatus) error {
	if w.err != nil {
		return fmt.Errorf("status.inventory: %w", w.err)
	}
	if w.zw == nil {
		s.Inventory, s.InventoryGzip, s.InventoryCount = w.entries, nil, 0
		if w.n == 0 {
			s.Inventory = nil
		}
		return nil
	}
	w.json.WriteByte(']')
	if _, err := w.json.WriteTo(w.zw); err != nil {
		return fmt.Errorf("status.inventoryGzip: %w", err)
	}
	if err := w.zw.Close(); err != nil {
		return fmt.Errorf("status.inventoryGzip: %w", err)
	}
	s.Inventory, s.InventoryGzip, s.InventoryCount = nil, w.gz.Bytes(), w.n
	return nil
}
