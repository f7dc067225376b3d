package worker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A frame is a big-endian uint32 length and that many bytes of JSON.
const frameHeader = 4

// writeFrame encodes v as one frame and flushes it.
func writeFrame(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxFrame {
		return fmt.Errorf("message of %d bytes exceeds the limit of %d", len(b), maxFrame)
	}
	var h [frameHeader]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(b)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Flush()
}

// maxFrame bounds a message whatever its reader's limit: 1 GiB.
const maxFrame = 1 << 30

// readFrame decodes one frame into v; it refuses frames longer than limit
// bytes before reading them. Numbers in untyped values decode as
// json.Number, for exact integers and floats (see value.go).
func readFrame(r *bufio.Reader, limit int, v any) error {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(h[:]))
	if n > limit {
		return &frameTooLargeError{size: n, limit: limit}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

type frameTooLargeError struct{ size, limit int }

func (e *frameTooLargeError) Error() string {
	return fmt.Sprintf("a message of %d bytes exceeds the limit of %d", e.size, e.limit)
}
