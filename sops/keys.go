package sops

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"filippo.io/age"
)

// KeySuffix is how a Secret names its age identity entries, as Flux's
// kustomize-controller does (`*.agekey`).
const KeySuffix = ".agekey"

// Limits on the key material a caller hands over: an identity line is 74
// characters (X25519) or about 2 KiB (post-quantum hybrid).
const (
	// MaxKeyEntrySize is the largest identity entry or file read.
	MaxKeyEntrySize = 64 << 10
	// MaxKeys is the most identities one Keys holds.
	MaxKeys = 256
)

// Keys are age identities that decrypt SOPS data keys. The zero value
// holds none and decrypts nothing. Keys never print their secret part:
// String and Recipients name the public keys only.
type Keys struct {
	ids        []age.Identity
	recipients []string // the public key of each identity, in order
}

// ParseKeys reads the age identities in the `*.agekey` entries of a Secret
// (name to content, as a Secret's data decodes). Other entries are
// ignored: Flux keeps OpenPGP keys (`*.asc`) and cloud credentials in the
// same Secret, and this package uses none of them. It fails when no entry
// holds an identity.
func ParseKeys(entries map[string][]byte) (Keys, error) {
	var ks Keys
	names := make([]string, 0, len(entries))
	for name := range entries {
		if strings.HasSuffix(name, KeySuffix) {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a deterministic order, so errors are too
	if len(names) == 0 {
		return Keys{}, fmt.Errorf("no %s entry with an age identity", KeySuffix)
	}
	for _, name := range names {
		k, err := ParseKeyFile(name, entries[name])
		if err != nil {
			return Keys{}, err
		}
		if err := ks.add(k); err != nil {
			return Keys{}, err
		}
	}
	return ks, nil
}

// ParseKeyFile reads the age identities in one identity file, as age-keygen
// writes it and SOPS_AGE_KEY_FILE names it: one AGE-SECRET-KEY-1... (or
// AGE-SECRET-KEY-PQ-1...) per line, with `#` comments and blank lines.
// name only names the file in errors. An error never quotes a line: a
// malformed line may still be most of a key.
func ParseKeyFile(name string, data []byte) (Keys, error) {
	if len(data) > MaxKeyEntrySize {
		return Keys{}, fmt.Errorf("age key %q: larger than %d bytes", name, MaxKeyEntrySize)
	}
	var ks Keys
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxKeyEntrySize+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, rcpt, err := parseIdentity(line)
		if err != nil {
			return Keys{}, fmt.Errorf("age key %q: line %d: %w", name, n, err)
		}
		if len(ks.ids) >= MaxKeys {
			return Keys{}, fmt.Errorf("age key %q: more than %d identities", name, MaxKeys)
		}
		ks.ids = append(ks.ids, id)
		ks.recipients = append(ks.recipients, rcpt)
	}
	if err := sc.Err(); err != nil {
		return Keys{}, fmt.Errorf("age key %q: unreadable (a line too long)", name)
	}
	if len(ks.ids) == 0 {
		return Keys{}, fmt.Errorf("age key %q: no age identity", name)
	}
	return ks, nil
}

// errNotIdentity is the one parse error: age's own errors may quote
// characters of the key (a bech32 checksum), so none is wrapped.
var errNotIdentity = errors.New("not an age identity (an age-keygen secret key line)")

// parseIdentity parses one identity line and returns it with its public key.
func parseIdentity(line string) (age.Identity, string, error) {
	switch {
	case strings.HasPrefix(line, "AGE-SECRET-KEY-PQ-1"):
		id, err := age.ParseHybridIdentity(line)
		if err != nil {
			return nil, "", errNotIdentity
		}
		return id, id.Recipient().String(), nil
	case strings.HasPrefix(line, "AGE-SECRET-KEY-1"):
		id, err := age.ParseX25519Identity(line)
		if err != nil {
			return nil, "", errNotIdentity
		}
		return id, id.Recipient().String(), nil
	}
	return nil, "", errNotIdentity
}

// add appends o's identities, skipping the ones ks already holds.
func (ks *Keys) add(o Keys) error {
	for i, r := range o.recipients {
		if slices.Contains(ks.recipients, r) {
			continue
		}
		if len(ks.ids) >= MaxKeys {
			return fmt.Errorf("more than %d age identities", MaxKeys)
		}
		ks.ids = append(ks.ids, o.ids[i])
		ks.recipients = append(ks.recipients, r)
	}
	return nil
}

// Merge returns the identities of ks and o together (a key file given on
// the command line and SOPS_AGE_KEY_FILE, say).
func (ks Keys) Merge(o Keys) (Keys, error) {
	out := Keys{ids: slices.Clone(ks.ids), recipients: slices.Clone(ks.recipients)}
	if err := out.add(o); err != nil {
		return Keys{}, err
	}
	return out, nil
}

// Len is the number of identities.
func (ks Keys) Len() int { return len(ks.ids) }

// Recipients are the public keys (age1...) of the identities: safe to show.
func (ks Keys) Recipients() []string { return slices.Clone(ks.recipients) }

// String names the public keys only, so that printing Keys by mistake
// shows no secret.
func (ks Keys) String() string {
	return "age keys [" + strings.Join(ks.recipients, ", ") + "]"
}

// GoString is String, for %#v.
func (ks Keys) GoString() string { return ks.String() }
