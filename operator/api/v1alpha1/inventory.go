package v1alpha1

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
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
	if len(ms.Status.InventoryGzip) == 0 {
		return ms.Status.Inventory, nil
	}
	entries, err := decodeInventory(ms.Status.InventoryGzip, MaxInventoryJSON)
	if err != nil {
		return nil, fmt.Errorf("ManifestSync %s/%s: status.inventoryGzip: %w", ms.Namespace, ms.Name, err)
	}
	if len(ms.Status.Inventory) > 0 {
		return nil, fmt.Errorf("ManifestSync %s/%s: both status.inventory and status.inventoryGzip are set", ms.Namespace, ms.Name)
	}
	return entries, nil
}

// decodeInventory reads a gzipped inventory of at most limit bytes of
// JSON.
func decodeInventory(gz []byte, limit int64) ([]InventoryEntry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("corrupt gzip: %w", err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("more than %d bytes decompressed: refused", limit)
	}
	entries := []InventoryEntry{}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("not a JSON array of entries: %w", err)
	}
	return entries, nil
}

// SetInventory writes entries to the status: as status.inventory when
// their JSON is at most threshold bytes, else gzipped as
// status.inventoryGzip with status.inventoryCount. On an error the status
// is left as it was.
func (s *ManifestSyncStatus) SetInventory(entries []InventoryEntry, threshold int) error {
	raw, err := json.Marshal(entries)
	if err != nil {
		return fmt.Errorf("status.inventory: %w", err)
	}
	if len(raw) <= threshold {
		s.Inventory, s.InventoryGzip, s.InventoryCount = entries, nil, 0
		return nil
	}
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("status.inventoryGzip: %w", err)
	}
	if _, err := zw.Write(raw); err != nil {
		return fmt.Errorf("status.inventoryGzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("status.inventoryGzip: %w", err)
	}
	s.Inventory, s.InventoryGzip, s.InventoryCount = nil, b.Bytes(), len(entries)
	return nil
}
