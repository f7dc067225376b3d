package v1alpha1

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// w8Inventory is shaped like bench W8's: 20 Secrets mirrored into 1,000
// namespaces by a namespaceSelector target, each with its fields digest.
func w8Inventory() []InventoryEntry {
	var out []InventoryEntry
	for ns := range 1000 {
		for s := range 20 {
			id := fmt.Sprintf("ns-%04d_labelled-%02d__Secret", ns, s)
			sum := sha256.Sum256([]byte(id))
			out = append(out, InventoryEntry{ID: id, Version: "v1", Target: fmt.Sprintf("mirrored/ns-%04d", ns), Fields: fmt.Sprintf("%x", sum[:8])})
		}
	}
	return out
}

func TestSetInventoryRoundTrip(t *testing.T) {
	entries := w8Inventory()
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	ms := &ManifestSync{}
	if err := ms.Status.SetInventory(entries, 256<<10); err != nil {
		t.Fatal(err)
	}
	gz := len(ms.Status.InventoryGzip)
	t.Logf("W8 inventory: %d entries, %d bytes of JSON, %d bytes gzipped (%d in the status's base64)", len(entries), len(raw), gz, (gz+2)/3*4)
	if ms.Status.Inventory != nil || ms.Status.InventoryCount != len(entries) || gz == 0 {
		t.Fatalf("status: %d plain entries, count %d, %d gzipped bytes", len(ms.Status.Inventory), ms.Status.InventoryCount, gz)
	}
	// The API server refuses requests over 2 MiB (3 MiB for etcd): the
	// gzipped W8 inventory must leave most of it.
	if (gz+2)/3*4 > 512<<10 {
		t.Errorf("the gzipped W8 inventory takes %d bytes of base64, want at most 512 KiB", (gz+2)/3*4)
	}
	back, err := ms.InventoryEntries()
	if err != nil || len(back) != len(entries) || back[12345] != entries[12345] {
		t.Fatalf("round trip: %d entries, %v", len(back), err)
	}

	// Below the threshold: plain, and the gzipped form cleared.
	small := entries[:3]
	if err := ms.Status.SetInventory(small, 256<<10); err != nil {
		t.Fatal(err)
	}
	if len(ms.Status.Inventory) != 3 || ms.Status.InventoryGzip != nil || ms.Status.InventoryCount != 0 {
		t.Errorf("status: %+v", ms.Status)
	}
	if back, err := ms.InventoryEntries(); err != nil || len(back) != 3 {
		t.Errorf("plain: %d entries, %v", len(back), err)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestInventoryEntriesRefusesBadGzip(t *testing.T) {
	valid := gzipped(t, []byte(`[{"id":"a_b__Secret","v":"v1"}]`))
	for name, c := range map[string]struct {
		status ManifestSyncStatus
		want   string
	}{
		"not gzip":  {ManifestSyncStatus{InventoryGzip: []byte("not gzip")}, "not gzip"},
		"truncated": {ManifestSyncStatus{InventoryGzip: valid[:len(valid)-6]}, "corrupt gzip"},
		"not json":  {ManifestSyncStatus{InventoryGzip: gzipped(t, []byte("{"))}, "not a JSON array"},
		"both":      {ManifestSyncStatus{InventoryGzip: valid, Inventory: []InventoryEntry{{ID: "a_c__Secret", Version: "v1"}}}, "both"},
	} {
		ms := &ManifestSync{Status: c.status}
		ms.Namespace, ms.Name = "team", "web"
		got, err := ms.InventoryEntries()
		if err == nil || got != nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ManifestSync team/web: status.inventoryGzip") && name != "both" {
			t.Errorf("%s: %d entries, error %v; want one saying %q", name, len(got), err, c.want)
		}
	}
}

// A zip bomb is refused after limit bytes, not inflated.
func TestDecodeInventoryLimit(t *testing.T) {
	bomb := gzipped(t, append(append([]byte("["), bytes.Repeat([]byte(" "), 1<<20)...), ']'))
	none := func(InventoryEntry) bool { t.Error("an entry in the bomb"); return true }
	if err := decodeInventory(bomb, 1<<20, none); err == nil || !strings.Contains(err.Error(), "more than 1048576 bytes") {
		t.Errorf("error %v", err)
	}
	if err := decodeInventory(bomb, 2<<20, none); err != nil {
		t.Errorf("under the limit: %v", err)
	}
	// A valid array followed by more than the limit is refused too.
	tail := gzipped(t, append([]byte(`[{"id":"a_b__Secret","v":"v1"}]`), bytes.Repeat([]byte(" "), 1<<20)...))
	if err := decodeInventory(tail, 1<<20, func(InventoryEntry) bool { return true }); err == nil || !strings.Contains(err.Error(), "more than 1048576 bytes") {
		t.Errorf("a long tail: error %v", err)
	}
}

// The inventory is read one entry at a time, and refuses what follows the
// array or is not one.
func TestDecodeInventoryStreams(t *testing.T) {
	entries := w8Inventory()
	ms := &ManifestSync{}
	if err := ms.Status.SetInventory(entries, 256<<10); err != nil {
		t.Fatal(err)
	}
	var seen int
	stop := fmt.Errorf("enough")
	err := ms.EachInventoryEntry(func(e InventoryEntry) error {
		if e != entries[seen] {
			t.Fatalf("entry %d: %+v, want %+v", seen, e, entries[seen])
		}
		if seen++; seen == 100 {
			return stop
		}
		return nil
	})
	if err != stop || seen != 100 {
		t.Errorf("stopped after %d entries with %v, want after 100 with its own error", seen, err)
	}
	for name, c := range map[string]struct{ json, want string }{
		"null":     {`null`, ""},
		"empty":    {`[]`, ""},
		"trailing": {`[{"id":"a_b__Secret","v":"v1"}] [`, "after the array"},
		"object":   {`{"id":"a_b__Secret"}`, "not a JSON array"},
		"bad item": {`[{"id":"a_b__Secret","v":"v1"},7]`, "not a JSON array"},
		"unclosed": {`[{"id":"a_b__Secret","v":"v1"}`, "not a JSON array"},
	} {
		err := decodeInventory(gzipped(t, []byte(c.json)), 1<<20, func(InventoryEntry) bool { return true })
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: error %v, want %q", name, err, c.want)
		}
	}
}

// InventoryWriter chooses the form as SetInventory did with the whole
// JSON in hand: plain up to the threshold, gzipped above, byte for byte
// the JSON of the entries.
func TestInventoryWriterThreshold(t *testing.T) {
	entries := w8Inventory()[:50]
	raw, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		threshold int
		plain     bool
	}{{len(raw), true}, {len(raw) - 1, false}, {0, false}} {
		var s ManifestSyncStatus
		if err := s.SetInventory(entries, c.threshold); err != nil {
			t.Fatal(err)
		}
		if plain := s.InventoryGzip == nil; plain != c.plain || c.plain && len(s.Inventory) != len(entries) || !c.plain && (s.Inventory != nil || s.InventoryCount != len(entries)) {
			t.Errorf("threshold %d of %d bytes: %d plain entries, %d gzipped bytes, count %d", c.threshold, len(raw), len(s.Inventory), len(s.InventoryGzip), s.InventoryCount)
			continue
		}
		if c.plain {
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(s.InventoryGzip))
		if err != nil {
			t.Fatal(err)
		}
		back, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(back, raw) {
			t.Errorf("threshold %d: the gzipped JSON differs from the entries' (%v)", c.threshold, err)
		}
	}
	var s ManifestSyncStatus
	if err := s.SetInventory(nil, 10); err != nil || s.Inventory != nil || s.InventoryGzip != nil || s.InventoryCount != 0 {
		t.Errorf("no entries: %+v, %v", s, err)
	}
}
