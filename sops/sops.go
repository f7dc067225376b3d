// Package sops decrypts files encrypted with SOPS (YAML, JSON, dotenv, INI
// and binary, told apart by extension as sops and Flux do) with age
// identities, through the sops Go module, so that a source's encrypted
// Secrets reach the transform decrypted (issue 28).
//
// Only age is used: a file whose key groups need AWS/GCP/Azure/Huawei KMS,
// Vault or OpenPGP to open is refused, naming the provider. The keys are
// handed in explicitly (Keys); nothing reads SOPS_AGE_KEY_FILE,
// ~/.config/sops, a gpg agent, a key service or the network. sops's own
// loggers are silenced (they print a comment's text on a warning).
//
// Decrypted values are Secret values: DecryptFiles returns them for the
// redactor (engine/redact), and no error of this package quotes a value, a
// line of a file or key material. Errors name the file and its key groups
// by their public recipients.
//
// The sops module links the cloud KMS SDKs whether or not they are used
// (its stores and key service import every key source), and its audit
// package reads /etc/sops/audit.yaml when the program starts. So the
// engine core must not import this package (it reaches net/http): the
// commands and the operator wire it in, as they wire the Helm fetcher.
package sops

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/logging"
	"github.com/getsops/sops/v3/stores/dotenv"
	"github.com/getsops/sops/v3/stores/ini"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"google.golang.org/grpc"
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

func init() {
	// sops logs through logrus to stderr; a warning in Tree.Decrypt quotes
	// a comment that does not decrypt. Nothing of it may reach our logs.
	for _, l := range logging.Loggers {
		l.SetOutput(io.Discard)
	}
}

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

// store is the part of a sops store this package uses.
type store interface {
	LoadEncryptedFile(in []byte) (gosops.Tree, error)
	EmitPlainFile(in gosops.TreeBranches) ([]byte, error)
}

func storeFor(f Format) store {
	switch f {
	case YAML:
		return sopsyaml.NewStore(&config.YAMLStoreConfig{})
	case JSON:
		return sopsjson.NewStore(&config.JSONStoreConfig{})
	case Dotenv:
		return dotenv.NewStore(&config.DotenvStoreConfig{})
	case INI:
		return ini.NewStore(&config.INIStoreConfig{})
	}
	return sopsjson.NewBinaryStore(&config.JSONBinaryStoreConfig{})
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

// load parses data as an encrypted sops file of its format. ok is false
// when it has no sops metadata (or is not of its format at all).
func load(name string, data []byte) (gosops.Tree, store, bool) {
	if !mayHold(data) {
		return gosops.Tree{}, nil, false
	}
	st := storeFor(FormatOf(name))
	tree, err := loadTree(st, data)
	if err != nil {
		return gosops.Tree{}, nil, false
	}
	return tree, st, tree.Metadata.Version != "" || tree.Metadata.MessageAuthenticationCode != ""
}

// loadTree runs a store's parser, which may panic on input it did not
// expect: a hostile file is an error, not a crash.
func loadTree(st store, data []byte) (tree gosops.Tree, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops parser failed")
		}
	}()
	return st.LoadEncryptedFile(data)
}

// IsEncrypted tells whether data (the content of the file at path) is a
// SOPS-encrypted file: one that carries sops metadata (a version and a
// mac) in the format its extension names.
func IsEncrypted(path string, data []byte) bool {
	if len(data) > MaxFileSize {
		return false
	}
	_, _, ok := load(path, data)
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
		tree, st, ok := load(name, data)
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
		plain, vals, err := decryptLoaded(name, tree, st, keys)
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
	tree, st, ok := load(name, data)
	if !ok {
		return nil, nil, fmt.Errorf("sops: file %q: not a sops-encrypted %s file", name, FormatOf(name))
	}
	return decryptLoaded(name, tree, st, keys)
}

// decryptLoaded decrypts a loaded tree: the data key through the age key
// service, the values, then the MAC check.
func decryptLoaded(name string, tree gosops.Tree, st store, keys Keys) ([]byte, []string, error) {
	nkeys := 0
	for _, g := range tree.Metadata.KeyGroups {
		nkeys += len(g)
	}
	if nkeys > MaxMasterKeys {
		return nil, nil, fmt.Errorf("sops: file %q: lists %d master keys, more than %d", name, nkeys, MaxMasterKeys)
	}
	groups := describeGroups(tree.Metadata.KeyGroups)
	if !slices.ContainsFunc(groups, func(g group) bool { return len(g.age) > 0 }) {
		return nil, nil, fmt.Errorf("sops: file %q: encrypted for %s only: only age keys are supported",
			name, strings.Join(otherProviders(groups), ", "))
	}
	if keys.Len() == 0 {
		return nil, nil, fmt.Errorf("sops: file %q: no age key given (the file needs one of %s)", name, describe(groups))
	}
	svc := ageService{keys: keys}
	dataKey, err := tree.Metadata.GetDataKeyWithKeyServices([]keyservice.KeyServiceClient{svc}, nil)
	if err != nil {
		// sops's error lists every key's attempt; ours says the same in
		// fewer words and quotes nothing of the file.
		return nil, nil, fmt.Errorf("sops: file %q: no age key given opens %s (keys given: %s)",
			name, describe(groups), strings.Join(keys.recipients, ", "))
	}

	encrypted := encryptedLeaves(tree.Branches)
	cipher := aes.NewCipher()
	mac, err := decryptTree(tree, dataKey, cipher)
	if err != nil {
		return nil, nil, fmt.Errorf("sops: file %q (%s): a value does not decrypt with the data key: the file was changed after it was encrypted", name, describe(groups))
	}
	want, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || tree.Metadata.MessageAuthenticationCode == "" {
		return nil, nil, fmt.Errorf("sops: file %q (%s): its MAC does not decrypt: the file was changed after it was encrypted", name, describe(groups))
	}
	if w, _ := want.(string); w != mac {
		return nil, nil, fmt.Errorf("sops: file %q (%s): MAC mismatch: the file was changed after it was encrypted", name, describe(groups))
	}
	values := decryptedValues(tree.Branches, encrypted)
	plain, err := emit(st, tree.Branches)
	if err != nil {
		return nil, nil, fmt.Errorf("sops: file %q: writing the plaintext %s failed", name, FormatOf(name))
	}
	return plain, values, nil
}

// decryptTree runs sops's tree decryption, which may panic on a tree it
// did not expect.
func decryptTree(tree gosops.Tree, key []byte, cipher gosops.Cipher) (mac string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops tree decryption failed")
		}
	}()
	return tree.Decrypt(key, cipher)
}

func emit(st store, b gosops.TreeBranches) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = errors.New("sops emitter failed")
		}
	}()
	return st.EmitPlainFile(b)
}

// group is a key group as errors name it: its age recipients and the
// other providers it lists.
type group struct {
	age    []string
	others []string // provider identifiers: kms, pgp, gcp_kms, azure_kv, hc_vault, hckms
}

func describeGroups(kgs []gosops.KeyGroup) []group {
	out := make([]group, 0, len(kgs))
	for _, kg := range kgs {
		var g group
		for _, k := range kg {
			if t := k.TypeToIdentifier(); t == "age" {
				g.age = append(g.age, k.ToString())
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

// encryptedLeaves marks, in walk order, the leaves of an encrypted tree
// that hold a sops-encrypted value.
func encryptedLeaves(b gosops.TreeBranches) []bool {
	var marks []bool
	for _, br := range b {
		walk(br, nil, func(v any, _ []string) {
			var s string
			switch v := v.(type) {
			case string:
				s = v
			case gosops.Comment:
				s = v.Value
			}
			marks = append(marks, strings.HasPrefix(s, string(encMarker)))
		})
	}
	return marks
}

// decryptedValues returns the values, after decryption, of the leaves
// marked encrypted, with the base64 decoding of a top-level "data" map's
// values (a Secret's data).
func decryptedValues(b gosops.TreeBranches, marks []bool) []string {
	var out []string
	i := 0
	for _, br := range b {
		walk(br, nil, func(v any, p []string) {
			if i >= len(marks) || !marks[i] {
				i++
				return
			}
			i++
			var s string
			switch v := v.(type) {
			case string:
				s = v
			case []byte:
				s = string(v)
			case gosops.Comment:
				s = v.Value
			case nil:
				return
			default:
				s = fmt.Sprint(v)
			}
			out = append(out, s)
			if len(p) == 2 && p[0] == "data" {
				if d, err := base64.StdEncoding.DecodeString(s); err == nil {
					out = append(out, string(d))
				}
			}
		})
	}
	return out
}

// walk calls leaf for every leaf of a sops tree branch, comments included,
// in a fixed order, with the path of map keys (list indexes are not in it).
func walk(v any, p []string, leaf func(v any, p []string)) {
	switch v := v.(type) {
	case gosops.TreeBranch:
		for _, it := range v {
			if c, ok := it.Key.(gosops.Comment); ok {
				leaf(c, p)
				continue
			}
			k, _ := it.Key.(string)
			walk(it.Value, append(slices.Clip(p), k), leaf)
		}
	case []any:
		for _, e := range v {
			walk(e, p, leaf)
		}
	default:
		leaf(v, p)
	}
}

// ageService is the only key service sops is given: it opens age-wrapped
// data keys with the identities handed in, and refuses every other
// provider, so that sops never reaches a KMS, Vault, a gpg agent or the
// environment.
type ageService struct {
	keys Keys
}

func (s ageService) Decrypt(_ context.Context, req *keyservice.DecryptRequest, _ ...grpc.CallOption) (*keyservice.DecryptResponse, error) {
	k := req.GetKey()
	if k.GetAgeKey() == nil {
		return nil, errors.New("only age keys are supported")
	}
	r, err := age.Decrypt(armor.NewReader(io.LimitReader(bytes.NewReader(req.GetCiphertext()), 64<<10)), s.keys.ids...)
	if err != nil {
		return nil, errors.New("no age key given opens the data key")
	}
	// A sops data key is 32 bytes; read a little more to tell a bad one.
	b, err := io.ReadAll(io.LimitReader(r, 1024))
	if err != nil {
		return nil, errors.New("the age-wrapped data key is corrupt")
	}
	return &keyservice.DecryptResponse{Plaintext: b}, nil
}

func (ageService) Encrypt(context.Context, *keyservice.EncryptRequest, ...grpc.CallOption) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("this key service only decrypts")
}
