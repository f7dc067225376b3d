// Package decrypt decrypts the SOPS-encrypted files of the snapshots a
// source.Resolver reads (spec.decryption, issue 28): SOPS returns the
// Resolver.Decrypt hook for a set of age keys, which the operator (keys of
// the Secret spec.decryption names, read as the ManifestSync's service
// account), the CLI (--sops-age-key-file, SOPS_AGE_KEY_FILE) and the web
// UI (the Secret read as the user) give their Resolver.
//
// It is part of the offline core: it imports package sops (age and the
// sops format, no network, no client-go) and the engine's types only.
// A Cache spares an operator the decryption of an unchanged file at every
// resync; plaintext is shared only between callers holding the same keys.
package decrypt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/sops"
)

// Func is the type of source.Resolver.Decrypt.
type Func = func(ctx context.Context, name string, snap *engine.Snapshot) (*engine.Snapshot, error)

// SOPS returns the Resolver.Decrypt hook that decrypts every SOPS file of
// a snapshot with keys, through cache when it is not nil. The snapshot it
// returns is a new one (snap, which caches share, is never modified): its
// Files and Root hold the plaintext of the encrypted files, Decrypted the
// decrypted values (for the redactor; with snap's own), Revision and the
// rest are snap's, as the encrypted content is what the revision names.
//
// Every encrypted file of Files (the source's path, what the transform and
// the engine read) must decrypt: one that fails fails the source, naming
// the file and its key groups by their recipients, never content. A file
// only in Root (the rest of a git repository, which kustomize may read
// through ../) that none of the keys opens is left as it is, encrypted: a
// repository may hold the files of other environments, encrypted for other
// keys, as Flux's decrypts only what kustomize reads. One the keys open
// that then fails (a changed value, a MAC mismatch) fails the source.
func SOPS(keys sops.Keys, cache *Cache) Func {
	kd := keysDigest(keys)
	return func(ctx context.Context, name string, snap *engine.Snapshot) (*engine.Snapshot, error) {
		d := &run{keys: keys, keysDigest: kd, cache: cache, memo: map[[32]byte]entry{}}
		out := *snap // Revision, Time, Origin, Refs, Pending: snap's
		files, err := d.tree(ctx, snap.Files, func(p string) string { return snap.FileName(name, p) }, true)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
		root, err := d.tree(ctx, snap.Root, func(p string) string { return name + ": the repository's " + p }, false)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
		out.Files, out.Root = files, root
		if len(d.values) > 0 {
			out.Decrypted = mergeValues(snap.Decrypted, d.values)
		}
		return &out, nil
	}
}

// run is one snapshot's decryption.
type run struct {
	keys       sops.Keys
	keysDigest [32]byte
	cache      *Cache
	// memo holds the files decrypted in this run, by key (the same
	// file is in Files and in Root).
	memo   map[[32]byte]entry
	values []string
	n      int // distinct encrypted files (by content) decrypted
}

// candidate tells the files worth handing to sops: its metadata is
// written under the key "sops" (or "sops_" keys), and a value it
// encrypted without metadata around it is an error there.
func candidate(data []byte) bool {
	return bytes.Contains(data, []byte("sops")) || bytes.Contains(data, []byte("ENC[AES256_GCM,"))
}

// tree decrypts the encrypted files of files, returning files itself when
// none is. nameOf names a file in errors. strict is false for Root: a
// file no key opens is kept as it is.
func (d *run) tree(ctx context.Context, files map[string][]byte, nameOf func(string) string, strict bool) (map[string][]byte, error) {
	if files == nil {
		return nil, nil
	}
	var out map[string][]byte
	paths := make([]string, 0, 16)
	for p, data := range files {
		if candidate(data) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths) // the first failure in path order, every time
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		data := files[p]
		plain, ok, err := d.file(p, nameOf(p), data)
		if err != nil {
			if !strict && errors.Is(err, sops.ErrNoKey) {
				continue
			}
			return nil, err
		}
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string][]byte, len(files))
			for q, b := range files {
				out[q] = b
			}
		}
		out[p] = plain
	}
	if out == nil {
		return files, nil
	}
	return out, nil
}

// file decrypts one file; ok is false when it is not encrypted. shown
// names it in errors (its path, extension kept, tells sops its format).
func (d *run) file(p, shown string, data []byte) (plain []byte, ok bool, err error) {
	key := fileKey(d.keysDigest, sops.FormatOf(p), data)
	e, seen := d.memo[key] // the same file in Files and Root counts once
	hit := seen
	if !hit && d.cache != nil {
		e, hit = d.cache.get(key)
	}
	if !hit {
		// shown ends in p, so sops tells the same format by its
		// extension; its errors name the file by it.
		out, vals, err := sops.DecryptFiles(map[string][]byte{shown: data}, d.keys)
		if err != nil {
			return nil, false, err
		}
		plain := out[shown]
		e = entry{plain: plain, values: vals, plainFile: sameSlice(plain, data)}
		if d.cache != nil {
			d.cache.put(key, e)
		}
	}
	d.memo[key] = e
	if e.plainFile {
		return nil, false, nil // a plain file that says "sops"
	}
	if !seen {
		if d.n++; d.n > sops.MaxFiles {
			return nil, false, fmt.Errorf("more than %d encrypted files", sops.MaxFiles)
		}
		d.values = append(d.values, e.values...)
	}
	return e.plain, true, nil
}

// sameSlice tells whether a and b are one slice: what sops.DecryptFiles
// returns for a file that is not encrypted.
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// mergeValues is the sorted, unique union of two value lists.
func mergeValues(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// keysDigest identifies a key set by the public keys of its identities:
// package sops derives each from its secret (Keys holds nothing else), so
// two sets with one digest hold the same identities.
func keysDigest(keys sops.Keys) [32]byte {
	rs := keys.Recipients()
	slices.Sort(rs)
	return sha256.Sum256([]byte(strings.Join(rs, "\n")))
}

// fileKey identifies the plaintext of a file: what it decrypts to depends
// on its content, its format and the keys (which must open it).
func fileKey(keys [32]byte, f sops.Format, data []byte) [32]byte {
	h := sha256.New()
	h.Write(keys[:])
	h.Write([]byte(f))
	h.Write([]byte{0})
	h.Write(data)
	var k [32]byte
	h.Sum(k[:0])
	return k
}
