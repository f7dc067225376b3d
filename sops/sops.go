// Package sops decrypts files encrypted with SOPS (YAML, JSON, dotenv, INI
// and binary, told apart by extension as sops and Flux do) with age
// identities, so that a source's encrypted Secrets reach the transform
// decrypted (issue 28).
//
// It reads the sops file format itself (decryption only): the sops Go
// module links every key source it knows (the AWS, GCP, Azure and Vault
// SDKs: +43 MB of binary, +24-31 MB of RSS in every process) and its
// audit package reads /etc/sops/audit.yaml at init. Only Shamir's secret
// sharing (several key groups) comes from the module, from its
// standard-library-only shamir package. The tests encrypt with the sops
// module itself, so every run checks this reader against sops.
//
// Only age is used: a file whose key groups need AWS/GCP/Azure/Huawei KMS,
// Vault or OpenPGP to open is refused, naming the provider. The keys are
// handed in explicitly (Keys); nothing reads SOPS_AGE_KEY_FILE,
// ~/.config/sops, a gpg agent, a key service or the network.
//
// Decrypted values are Secret values: DecryptFiles returns them for the
// redactor (engine/redact), and no error of this package quotes a value, a
// line of a file or key material. Errors name the file and its key groups
// by their public recipients.
package sops

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Limits on what one call decrypts.
const (
	// MaxFileSize is the largest encrypted file decrypted. A larger file
	// that holds SOPS data is refused; a larger plain file is left alone.
	MaxFileSize = 1 << 20
	// MaxFiles is the most encrypted files DecryptFiles decrypts at once.
	MaxFiles = 1000
	// MaxMasterKeys is the most master keys (all key groups together) a
	// file may list: each age one costs a key agreement per identity
	// given, so a file listing thousands would make decryption slow.
	MaxMasterKeys = 64
)

// Format is how sops reads a file, chosen by its extension.
type Format string

// The formats sops knows. Binary is any other file: sops stores it as a
// JSON document with one encrypted "data" value.
const (
	YAML   Format = "yaml"
	JSON   Format = "json"
	Dotenv Format = "dotenv"
	INI    Format = "ini"
	Binary Format = "binary"
)

// FormatOf tells a file's format by its extension, as sops's FormatForPath
// and Flux's kustomize-controller do.
func FormatOf(name string) Format {
	switch path.Ext(name) {
	case ".yaml", ".yml":
		return YAML
	case ".json":
		return JSON
	case ".env":
		return Dotenv
	case ".ini":
		return INI
	}
	return Binary
}

// encMarker starts every value sops encrypts (AES-256-GCM, the only
// cipher it writes).
var encMarker = []byte("ENC[AES256_GCM,data:")

// mayHold is the cheap test before a file is parsed: sops metadata is
// written under the key "sops" (YAML, JSON, binary, INI) or as "sops_"
// keys (dotenv), always with a mac.
func mayHold(data []byte) bool {
	return bytes.Contains(data, []byte("sops")) && bytes.Contains(data, []byte("mac"))
}

// loaded is a parsed sops file: its documents and metadata.
type loaded struct {
	docs []branch
	meta metadata
}

// load parses data as an encrypted sops file of its format. ok is false
// when it has no sops metadata (or is not of its format at all).
func load(name string, data []byte) (loaded, bool) {
	if !mayHold(data) {
		return loaded{}, false
	}
	l, err := loadTree(FormatOf(name), data)
	if err != nil {
		return loaded{}, false
	}
	return l, l.meta.version != "" || l.meta.mac != ""
}

// loadTree runs a format's parser, recovering a panic of the parsing
// libraries: a hostile file is an error, not a crash.
func loadTree(f Format, data []byte) (l loaded, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops parser failed")
		}
	}()
	docs, md, err := loadFile(f, data)
	return loaded{docs: docs, meta: md}, err
}

// IsEncrypted tells whether data (the content of the file at path) is a
// SOPS-encrypted file: one that carries sops metadata (a version and a
// mac) in the format its extension names.
func IsEncrypted(path string, data []byte) bool {
	if len(data) > MaxFileSize {
		return false
	}
	_, ok := load(path, data)
	return ok
}

// Decrypt decrypts the SOPS-encrypted file at path (the path only names
// the file and tells its format) with keys and returns its plaintext, in
// the same format.
func Decrypt(path string, data []byte, keys Keys) ([]byte, error) {
	out, _, err := decrypt(path, data, keys)
	return out, err
}

// DecryptFiles decrypts the SOPS-encrypted files of a snapshot (path to
// content) and returns the snapshot with their plaintext in their place;
// other files are returned as they are (the same slices). values are the
// decrypted values, sorted and unique, for the redactor: each value that
// was encrypted (a whole binary file is one), and for a top-level "data"
// map (a Secret's) each value's base64 decoding too. The error names the
// first file, in path order, that failed; nothing is returned with it.
func DecryptFiles(files map[string][]byte, keys Keys) (out map[string][]byte, values []string, err error) {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	out = make(map[string][]byte, len(files))
	seen := map[string]struct{}{}
	n := 0
	for _, name := range names {
		data := files[name]
		if len(data) > MaxFileSize {
			if mayHold(data) && bytes.Contains(data, encMarker) {
				return nil, nil, fmt.Errorf("sops: file %q: larger than %d bytes", name, MaxFileSize)
			}
			out[name] = data
			continue
		}
		tree, ok := load(name, data)
		if !ok {
			if bytes.Contains(data, encMarker) {
				// Values encrypted by sops without metadata that parses: a
				// file cut or edited by hand. Passing it on would apply the
				// ciphertext as if it were the value.
				return nil, nil, fmt.Errorf("sops: file %q: has sops-encrypted values but no sops metadata that can be read", name)
			}
			out[name] = data
			continue
		}
		if n++; n > MaxFiles {
			return nil, nil, fmt.Errorf("sops: more than %d encrypted files", MaxFiles)
		}
		plain, vals, err := decryptLoaded(name, tree, keys)
		if err != nil {
			return nil, nil, err
		}
		out[name] = plain
		for _, v := range vals {
			seen[v] = struct{}{}
		}
	}
	values = make([]string, 0, len(seen))
	for v := range seen {
		values = append(values, v)
	}
	sort.Strings(values)
	return out, values, nil
}

// decrypt is Decrypt returning the decrypted values too.
func decrypt(name string, data []byte, keys Keys) ([]byte, []string, error) {
	if len(data) > MaxFileSize {
		return nil, nil, fmt.Errorf("sops: file %q: larger than %d bytes", name, MaxFileSize)
	}
	tree, ok := load(name, data)
	if !ok {
		return nil, nil, fmt.Errorf("sops: file %q: not a sops-encrypted %s file", name, FormatOf(name))
	}
	return decryptLoaded(name, tree, keys)
}

// decryptLoaded decrypts a loaded file: the data key with the age
// identities, the values, then the MAC check.
func decryptLoaded(name string, l loaded, keys Keys) ([]byte, []string, error) {
	nkeys := 0
	for _, g := range l.meta.groups {
		nkeys += len(g)
	}
	if nkeys > MaxMasterKeys {
		return nil, nil, fmt.Errorf("sops: file %q: lists %d master keys, more than %d", name, nkeys, MaxMasterKeys)
	}
	groups := describeGroups(l.meta.groups)
	if !slices.ContainsFunc(groups, func(g group) bool { return len(g.age) > 0 }) {
		return nil, nil, fmt.Errorf("sops: file %q: encrypted for %s only: only age keys are supported",
			name, strings.Join(otherProviders(groups), ", "))
	}
	if keys.Len() == 0 {
		return nil, nil, &noKeyError{fmt.Sprintf("sops: file %q: no age key given (the file needs one of %s)", name, describe(groups))}
	}
	dataKey, err := l.meta.dataKey(keys)
	if err != nil {
		return nil, nil, &noKeyError{fmt.Sprintf("sops: file %q: no age key given opens %s (keys given: %s)",
			name, describe(groups), strings.Join(keys.recipients, ", "))}
	}
	mac, values, err := decryptDocs(l, dataKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sops: file %q (%s): a value does not decrypt with the data key: the file was changed after it was encrypted", name, describe(groups))
	}
	want, err := decryptValue(l.meta.mac, dataKey, l.meta.lastModified.Format(time.RFC3339))
	if err != nil || l.meta.mac == "" {
		return nil, nil, fmt.Errorf("sops: file %q (%s): its MAC does not decrypt: the file was changed after it was encrypted", name, describe(groups))
	}
	if w, _ := want.(string); w != mac {
		return nil, nil, fmt.Errorf("sops: file %q (%s): MAC mismatch: the file was changed after it was encrypted", name, describe(groups))
	}
	plain, err := emit(FormatOf(name), l.docs)
	if err != nil {
		return nil, nil, fmt.Errorf("sops: file %q: writing the plaintext %s failed", name, FormatOf(name))
	}
	return plain, values, nil
}

// decryptDocs decrypts the documents in place, recovering a panic: a
// tree no test foresaw is an error, not a crash.
func decryptDocs(l loaded, key []byte) (mac string, values []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops tree decryption failed")
		}
	}()
	return decryptBranches(l.docs, l.meta, key)
}

func emit(f Format, docs []branch) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops emitter failed")
		}
	}()
	return emitFile(f, docs)
}

// ErrNoKey is what the error of a file that none of the keys given opens
// (or none given at all) is (errors.Is): the file is not for these keys.
// A file one of them opens but that then fails (a changed value, a MAC
// mismatch) is another error.
var ErrNoKey = errors.New("no age key given opens the file")

// noKeyError is an ErrNoKey naming the file and its key groups.
type noKeyError struct{ msg string }

func (e *noKeyError) Error() string        { return e.msg }
func (e *noKeyError) Is(target error) bool { return target == ErrNoKey }

// group is a key group as errors name it: its age recipients and the
// other providers it lists.
type group struct {
	age    []string
	others []string // provider identifiers: kms, pgp, gcp_kms, azure_kv, hc_vault, hckms
}

func describeGroups(kgs [][]masterKey) []group {
	out := make([]group, 0, len(kgs))
	for _, kg := range kgs {
		var g group
		for _, k := range kg {
			if t := k.provider; t == "age" {
				g.age = append(g.age, k.recipient)
			} else if !slices.Contains(g.others, t) {
				g.others = append(g.others, t)
			}
		}
		out = append(out, g)
	}
	return out
}

func otherProviders(gs []group) []string {
	var out []string
	for _, g := range gs {
		for _, o := range g.others {
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	if len(out) == 0 {
		out = []string{"no key"}
	}
	return out
}

// describe names the key groups by their public age recipients, and the
// providers not used.
func describe(gs []group) string {
	parts := make([]string, 0, len(gs))
	for i, g := range gs {
		s := "key group " + strconv.Itoa(i+1) + " (age recipients " + strings.Join(g.age, ", ")
		if len(g.age) == 0 {
			s = "key group " + strconv.Itoa(i+1) + " (no age recipient"
		}
		if len(g.others) > 0 {
			s += "; " + strings.Join(g.others, ", ") + " not used: only age keys are supported"
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, ", ")
}
