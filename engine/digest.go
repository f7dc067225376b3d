package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// digestJSON returns "sha256:<hex>" over v's canonical JSON: object keys
// sorted, no insignificant space, no HTML escaping. Equal values always have
// equal digests. v must be JSON-shaped (map[string]any, []any, string, bool,
// integers, float64, nil) or a type of the engine that encodes as such.
func digestJSON(v any) (string, error) {
	var c canonical
	return c.digest(v)
}

// canonical writes canonical JSON into buffers it keeps, so that digesting
// every object of a target allocates little but the digests.
type canonical struct {
	buf     []byte
	entries []entry // a stack of the entries of the maps being written
}

// canonicals are encoders whose buffers are used again: a fan-out
// digests tens of thousands of objects at each evaluation.
var canonicals = sync.Pool{New: func() any { return &canonical{} }}

type entry struct {
	key   string
	value any
}

// digest is digestJSON with c's buffers.
func (c *canonical) digest(v any) (string, error) {
	b, err := c.append(c.buf[:0], v)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	c.buf = b
	return digestBytes(b), nil
}

// digestTyped digests a Go value of the API types through encoding/json,
// which is deterministic for them (struct fields in order, map keys sorted).
func digestTyped(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	return digestBytes(b), nil
}

func digestBytes(b []byte) string {
	const prefix = "sha256:"
	s := sha256.Sum256(b)
	var out [len(prefix) + 2*sha256.Size]byte
	copy(out[:], prefix)
	hex.Encode(out[len(prefix):], s[:])
	return string(out[:])
}

// ObjectDigest returns "sha256:<hex>" over an object's canonical JSON, or
// an empty string for a value JSON cannot hold.
func ObjectDigest(obj map[string]any) string {
	d, _ := digestJSON(obj)
	return d
}

// appendCanonical appends v's canonical JSON. It is written out rather than
// left to encoding/json because digests sit on the hot path of every
// evaluation, and reflection there costs more than the transform itself.
func appendCanonical(b []byte, v any) ([]byte, error) {
	var c canonical
	return c.append(b, v)
}

func (c *canonical) append(b []byte, v any) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return appendString(b, v), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%v has no JSON form", v)
		}
		// As encoding/json formats floats (ES6 number to string).
		format := byte('f')
		if abs := math.Abs(v); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
			format = 'e'
		}
		b = strconv.AppendFloat(b, v, format, -1, 64)
		if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1] // e-09 -> e-9
			b = b[:n-1]
		}
		return b, nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = c.append(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case []string:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, e)
		}
		return append(b, ']'), nil
	case map[string]any:
		// The entries go on c's stack; nested maps push theirs above them
		// (a reallocation leaves these in the old array, still valid). An
		// error leaves them there, which only wastes the space.
		start := len(c.entries)
		for k, e := range v {
			c.entries = append(c.entries, entry{k, e})
		}
		entries := c.entries[start:]
		slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
		b = append(b, '{')
		for i, e := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, e.key)
			b = append(b, ':')
			if b, err = c.append(b, e.value); err != nil {
				return nil, err
			}
		}
		c.entries = c.entries[:start]
		return append(b, '}'), nil
	case map[string]string:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = e
		}
		return c.append(b, m)
	}
	return nil, fmt.Errorf("cannot digest a %T", v)
}

const hexDigits = "0123456789abcdef"

// plainJSON are the bytes a JSON string holds as they are: printable ASCII
// but the quote and the backslash.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] needs no escape and is not appended yet
	for i := 0; i < len(s); {
		c := s[i]
		if plainJSON[c] {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				b = append(b, `\ufffd`...) // invalid UTF-8
			}
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
