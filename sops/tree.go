package sops

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/getsops/sops/v3/shamir"
)

// The document model of a sops file, as sops's stores build it: a branch
// is an ordered mapping whose keys are strings or comments; a value is a
// scalar (string, int, float64, bool, time.Time, []byte, nil), a branch, a
// list (whose elements may be comments) or a comment.
type (
	comment struct {
		value  string
		inline bool // a comment on the line of a value (YAML)
	}
	item struct {
		key   any // string or comment
		value any
	}
	branch []item
)

// metadata is what this package reads of a file's `sops` entry.
type metadata struct {
	groups          [][]masterKey
	shamirThreshold int
	lastModified    time.Time
	mac             string
	version         string
	rules           rules
}

// masterKey is one entry of a key group: its provider identifier (age,
// kms, pgp, gcp_kms, azure_kv, hc_vault, hckms) and, for age, the
// recipient and the armored wrapped data key.
type masterKey struct {
	provider  string
	recipient string
	enc       string
}

// rules are the file's choice of which values are encrypted. At most one
// of the suffix and regex fields is set; with none, the unencrypted suffix
// is "_unencrypted".
type rules struct {
	unencryptedSuffix       string
	encryptedSuffix         string
	unencryptedRegex        *regexp.Regexp
	encryptedRegex          *regexp.Regexp
	unencryptedCommentRegex *regexp.Regexp
	encryptedCommentRegex   *regexp.Regexp
	macOnlyEncrypted        bool
}

// The metadata sections of each provider, in the order sops lists a key
// group's keys.
var providerOrder = []string{"kms", "gcp_kms", "hckms", "azure_kv", "hc_vault", "pgp", "age"}

// errNoMetadata is a file without a sops entry.
var errNoMetadata = errors.New("no sops metadata")

// metadataFrom reads the sops entry (already unflattened) of a file.
func metadataFrom(b branch) (metadata, error) {
	var md metadata
	get := func(k string) any {
		for _, it := range b {
			if s, ok := it.key.(string); ok && s == k {
				return it.value
			}
		}
		return nil
	}
	lm, err := time.Parse(time.RFC3339, asString(get("lastmodified")))
	if err != nil {
		return md, errors.New("lastmodified is not a time")
	}
	md.lastModified = lm
	md.mac = asString(get("mac"))
	md.version = asString(get("version"))
	if v := get("shamir_threshold"); v != nil {
		n, err := asInt(v)
		if err != nil {
			return md, err
		}
		md.shamirThreshold = n
	}
	if v := get("mac_only_encrypted"); v != nil {
		bv, err := asBool(v)
		if err != nil {
			return md, err
		}
		md.rules.macOnlyEncrypted = bv
	}
	flat, err := groupFrom(b)
	if err != nil {
		return md, err
	}
	if len(flat) > 0 {
		md.groups = [][]masterKey{flat}
	} else if kgs, ok := get("key_groups").([]any); ok && len(kgs) > 0 {
		for _, g := range kgs {
			gb, ok := g.(branch)
			if !ok {
				return md, errors.New("a key group is not a mapping")
			}
			keys, err := groupFrom(gb)
			if err != nil {
				return md, err
			}
			md.groups = append(md.groups, keys)
		}
	} else {
		return md, errors.New("no keys in the file")
	}

	n := 0
	re := func(k string) (*regexp.Regexp, error) {
		s := asString(get(k))
		if s == "" {
			return nil, nil
		}
		n++
		r, err := regexp.Compile(s)
		if err != nil {
			// sops ignores the error of each match: the rule matches nothing.
			return regexp.MustCompile(`$.^`), nil
		}
		return r, nil
	}
	md.rules.unencryptedSuffix = asString(get("unencrypted_suffix"))
	md.rules.encryptedSuffix = asString(get("encrypted_suffix"))
	for _, s := range []string{md.rules.unencryptedSuffix, md.rules.encryptedSuffix} {
		if s != "" {
			n++
		}
	}
	for k, dst := range map[string]**regexp.Regexp{
		"unencrypted_regex":         &md.rules.unencryptedRegex,
		"encrypted_regex":           &md.rules.encryptedRegex,
		"unencrypted_comment_regex": &md.rules.unencryptedCommentRegex,
		"encrypted_comment_regex":   &md.rules.encryptedCommentRegex,
	} {
		r, err := re(k)
		if err != nil {
			return md, err
		}
		*dst = r
	}
	if n > 1 {
		return md, errors.New("more than one encryption rule")
	}
	if n == 0 {
		md.rules.unencryptedSuffix = "_unencrypted"
	}
	return md, nil
}

// groupFrom reads the provider lists of a key group (or of the metadata
// itself, where a single group is written flat).
func groupFrom(b branch) ([]masterKey, error) {
	var out []masterKey
	for _, p := range providerOrder {
		for _, it := range b {
			if s, ok := it.key.(string); !ok || s != p {
				continue
			}
			list, ok := it.value.([]any)
			if !ok {
				if it.value == nil {
					continue
				}
				return nil, fmt.Errorf("%s keys are not a list", p)
			}
			for _, e := range list {
				eb, ok := e.(branch)
				if !ok {
					if _, isComment := e.(comment); isComment {
						continue
					}
					return nil, fmt.Errorf("a %s key is not a mapping", p)
				}
				k := masterKey{provider: p}
				for _, f := range eb {
					switch f.key {
					case "recipient":
						if p == "age" {
							k.recipient = strings.TrimSpace(asString(f.value))
						}
					case "enc":
						k.enc = asString(f.value)
					}
				}
				out = append(out, k)
			}
		}
	}
	return out, nil
}

func asString(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case time.Time:
		return v.Format(time.RFC3339)
	}
	return ""
}

func asInt(v any) (int, error) {
	switch v := v.(type) {
	case int:
		return v, nil
	case float64:
		return int(v), nil
	case bool:
		if v {
			return 1, nil
		}
		return 0, nil
	case string:
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 0, 0)
		if err != nil {
			return 0, errors.New("shamir_threshold is not a number")
		}
		return int(n), nil
	}
	return 0, errors.New("shamir_threshold is not a number")
}

func asBool(v any) (bool, error) {
	switch v := v.(type) {
	case bool:
		return v, nil
	case int:
		return v != 0, nil
	case float64:
		return v != 0, nil
	case string:
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, errors.New("mac_only_encrypted is not a boolean")
		}
		return b, nil
	}
	return false, errors.New("mac_only_encrypted is not a boolean")
}

// errNoKeyOpens is every failure to recover the data key.
var errNoKeyOpens = errors.New("no age key given opens the data key")

// dataKey recovers the data key: one age key of each group opens the
// group's part; with several groups, the parts are Shamir shares.
func (md metadata) dataKey(keys Keys) ([]byte, error) {
	var parts [][]byte
	for _, g := range md.groups {
		for _, k := range g {
			if k.provider != "age" {
				continue
			}
			if p, err := openAge(k.enc, keys); err == nil {
				parts = append(parts, p)
				break
			}
		}
	}
	if len(md.groups) > 1 {
		if len(parts) < md.shamirThreshold {
			return nil, errNoKeyOpens
		}
		key, err := shamir.Combine(parts)
		if err != nil {
			return nil, errNoKeyOpens
		}
		return key, nil
	}
	if len(parts) != 1 {
		return nil, errNoKeyOpens
	}
	return parts[0], nil
}

// openAge decrypts an armored age-wrapped data key with the identities.
func openAge(enc string, keys Keys) ([]byte, error) {
	r, err := age.Decrypt(armor.NewReader(io.LimitReader(strings.NewReader(enc), 64<<10)), keys.ids...)
	if err != nil {
		return nil, errNoKeyOpens
	}
	// A sops data key is 32 bytes; read a little more to tell a bad one.
	b, err := io.ReadAll(io.LimitReader(r, 1024))
	if err != nil {
		return nil, errors.New("the age-wrapped data key is corrupt")
	}
	return b, nil
}

// encRe is the form of a value sops encrypted: AES-256-GCM ciphertext,
// nonce and tag in base64, and the type of the plaintext.
var encRe = regexp.MustCompile(`^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]`)

// decryptValue opens one encrypted value; ad is the additional data (the
// value's path). An empty string is what sops writes for an empty value.
func decryptValue(s string, key []byte, ad string) (any, error) {
	if s == "" {
		return "", nil
	}
	m := encRe.FindStringSubmatch(s)
	if m == nil {
		return nil, errors.New("not an encrypted value")
	}
	var raw [3][]byte
	for i := range raw {
		b, err := base64.StdEncoding.DecodeString(m[i+1])
		if err != nil {
			return nil, errors.New("an encrypted value is not base64")
		}
		raw[i] = b
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.New("the data key is not an AES key")
	}
	if len(raw[1]) == 0 {
		return nil, errors.New("an encrypted value has no nonce")
	}
	gcm, err := cipher.NewGCMWithNonceSize(block, len(raw[1]))
	if err != nil {
		return nil, errors.New("an encrypted value has a bad nonce")
	}
	pt, err := gcm.Open(nil, raw[1], append(raw[0], raw[2]...), []byte(ad))
	if err != nil {
		return nil, errors.New("a value does not open with the data key")
	}
	switch m[4] {
	case "str":
		return string(pt), nil
	case "int":
		n, err := strconv.Atoi(string(pt))
		return n, err
	case "float":
		return strconv.ParseFloat(string(pt), 64)
	case "bytes":
		return pt, nil
	case "bool":
		return strconv.ParseBool(string(pt))
	case "time":
		var t time.Time
		err := t.UnmarshalText(pt)
		return t, err
	case "comment":
		return comment{value: string(pt)}, nil
	}
	return nil, errors.New("an encrypted value has an unknown type")
}

// macBytes is how sops feeds a value to the MAC.
func macBytes(v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case int:
		return []byte(strconv.Itoa(v)), nil
	case float64:
		return []byte(strconv.FormatFloat(v, 'f', -1, 64)), nil
	case bool:
		if v {
			return []byte("True"), nil
		}
		return []byte("False"), nil
	case []byte:
		return v, nil
	case time.Time:
		return v.MarshalText()
	case comment:
		return []byte(v.value), nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

// macOnlyInit starts the MAC of a file with mac_only_encrypted, so that it
// differs from the MAC of the same values without: SHA-256("sops").
var macOnlyInit = func() []byte {
	sum := sha256.Sum256([]byte("sops"))
	return sum[:]
}()

// decrypter walks a tree in sops's order, decrypting in place the values
// the rules say are encrypted, hashing the MAC and collecting the
// decrypted values for the redactor.
type decrypter struct {
	key    []byte
	rules  rules
	hash   hash.Hash // SHA-512 of the values, in walk order
	values []string
}

// decryptBranches decrypts every document and returns the MAC, as sops
// writes it (upper-case hex of SHA-512).
func decryptBranches(bs []branch, md metadata, key []byte) (string, []string, error) {
	h := sha512.New()
	if md.rules.macOnlyEncrypted {
		h.Write(macOnlyInit)
	}
	d := &decrypter{key: key, rules: md.rules, hash: h}
	for _, b := range bs {
		if _, err := d.branch(b, nil, nil); err != nil {
			return "", nil, err
		}
	}
	return fmt.Sprintf("%X", h.Sum(nil)), d.values, nil
}

func (d *decrypter) value(v any, p []string, cs [][]string) (any, error) {
	switch v := v.(type) {
	case branch:
		return d.branch(v, p, cs)
	case []any:
		return d.list(v, p, cs)
	case nil:
		return nil, nil
	case []byte:
		return d.leaf(string(v), p, cs)
	case string, int, bool, float64, time.Time, comment:
		return d.leaf(v, p, cs)
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

func (d *decrypter) list(l []any, p []string, cs [][]string) ([]any, error) {
	cs = append(slices.Clip(cs), nil)
	for i, v := range l {
		c, isComment := v.(comment)
		if isComment {
			cs[len(cs)-1] = append(cs[len(cs)-1], c.value)
		}
		nv, err := d.value(v, p, cs)
		if err != nil {
			return nil, err
		}
		l[i] = nv
		if !isComment {
			cs[len(cs)-1] = nil
		}
	}
	return l, nil
}

func (d *decrypter) branch(b branch, p []string, cs [][]string) (branch, error) {
	cs = append(slices.Clip(cs), nil)
	for i, it := range b {
		if c, ok := it.key.(comment); ok {
			cs[len(cs)-1] = append(cs[len(cs)-1], c.value)
			nv, err := d.value(c, p, cs)
			if err != nil {
				return nil, err
			}
			switch nv := nv.(type) {
			case comment:
				b[i].key = nv
			case string:
				b[i].key = comment{value: nv, inline: c.inline}
			default:
				return nil, errors.New("a comment decrypts to a value")
			}
			continue
		}
		c, valueIsComment := it.value.(comment)
		if valueIsComment {
			cs[len(cs)-1] = append(cs[len(cs)-1], c.value)
		}
		k, ok := it.key.(string)
		if !ok {
			return nil, errors.New("a key that is not a string")
		}
		nv, err := d.value(it.value, append(slices.Clip(p), k), cs)
		if err != nil {
			return nil, err
		}
		b[i].value = nv
		if !valueIsComment {
			cs[len(cs)-1] = nil
		}
	}
	return b, nil
}

// leaf decrypts one scalar or comment if the rules say it is encrypted.
func (d *decrypter) leaf(in any, p []string, cs [][]string) (any, error) {
	c, isComment := in.(comment)
	enc := d.rules.encrypted(p, cs, isComment)
	v := in
	if enc {
		ad := strings.Join(p, ":") + ":"
		if isComment {
			// A comment that does not decrypt was written in the clear
			// by an old sops: it stays as it is.
			if dv, err := decryptValue(c.value, d.key, ad); err == nil {
				v = dv
			}
		} else if s, ok := in.(string); ok {
			dv, err := decryptValue(s, d.key, ad)
			if err != nil {
				return nil, err
			}
			v = dv
		} else {
			return nil, fmt.Errorf("an encrypted value of type %T", in)
		}
	}
	// What held sops ciphertext goes to the redactor, decrypted.
	if src, _ := in.(string); strings.HasPrefix(src, string(encMarker)) || strings.HasPrefix(c.value, string(encMarker)) {
		d.collect(v, p)
	}
	if !d.rules.macOnlyEncrypted || enc {
		if _, isC := v.(comment); !isC {
			b, err := macBytes(v)
			if err != nil {
				return nil, err
			}
			d.hash.Write(b)
		}
	}
	return v, nil
}

// collect keeps a decrypted value for the redactor, with the base64
// decoding of a value of a top-level "data" map (a Secret's data).
func (d *decrypter) collect(v any, p []string) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case comment:
		s = v.value
	case nil:
		return
	default:
		s = fmt.Sprint(v)
	}
	d.values = append(d.values, s)
	if len(p) == 2 && p[0] == "data" {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			d.values = append(d.values, string(b))
		}
	}
}

// encrypted tells, as sops decides, whether the value at path p (with the
// comments stack cs before it) is encrypted.
func (r rules) encrypted(p []string, cs [][]string, isComment bool) bool {
	enc := true
	if r.unencryptedSuffix != "" && slices.ContainsFunc(p, func(k string) bool { return strings.HasSuffix(k, r.unencryptedSuffix) }) {
		enc = false
	}
	if r.encryptedSuffix != "" {
		enc = slices.ContainsFunc(p, func(k string) bool { return strings.HasSuffix(k, r.encryptedSuffix) })
	}
	if r.unencryptedRegex != nil && slices.ContainsFunc(p, r.unencryptedRegex.MatchString) {
		enc = false
	}
	if r.encryptedRegex != nil {
		enc = slices.ContainsFunc(p, r.encryptedRegex.MatchString)
	}
	if r.unencryptedCommentRegex != nil {
		for _, s := range cs {
			if slices.ContainsFunc(s, r.unencryptedCommentRegex.MatchString) {
				enc = false
				break
			}
		}
	}
	if r.encryptedCommentRegex != nil {
		enc = false
	outer:
		for i, s := range cs {
			for j, c := range s {
				// The comment that matches is not itself encrypted: skip
				// the last comment when it is the one being decided.
				if isComment && i == len(cs)-1 && j == len(s)-1 {
					continue
				}
				if r.encryptedCommentRegex.MatchString(c) {
					enc = true
					break outer
				}
			}
		}
	}
	return enc
}

// unflatten rebuilds the metadata tree that dotenv and INI files write as
// flat keys (`age__list_0__map_recipient`).
func unflatten(b branch) (branch, error) {
	type node struct {
		value   any
		set     bool
		subkeys map[string]*node
		indices map[int]*node
	}
	root := &node{}
	for _, it := range b {
		k, ok := it.key.(string)
		if !ok {
			continue
		}
		n := root
		for _, t := range tokenize(k) {
			if t.isList {
				if n.indices == nil {
					n.indices = map[int]*node{}
				}
				if n.indices[t.pos] == nil {
					n.indices[t.pos] = &node{}
				}
				n = n.indices[t.pos]
			} else {
				if n.subkeys == nil {
					n.subkeys = map[string]*node{}
				}
				if n.subkeys[t.key] == nil {
					n.subkeys[t.key] = &node{}
				}
				n = n.subkeys[t.key]
			}
		}
		if n.set {
			return nil, errors.New("a duplicate metadata key")
		}
		n.value, n.set = it.value, true
	}
	var conv func(n *node) (any, error)
	conv = func(n *node) (any, error) {
		kinds := 0
		for _, has := range []bool{n.set, len(n.subkeys) > 0, len(n.indices) > 0} {
			if has {
				kinds++
			}
		}
		switch {
		case kinds > 1:
			return nil, errors.New("metadata keys of mixed kinds")
		case n.set:
			return n.value, nil
		case len(n.indices) > 0:
			out := make([]any, len(n.indices))
			for i, c := range n.indices {
				if i < 0 || i >= len(out) {
					return nil, errors.New("an incomplete metadata list")
				}
				v, err := conv(c)
				if err != nil {
					return nil, err
				}
				out[i] = v
			}
			return out, nil
		}
		keys := make([]string, 0, len(n.subkeys))
		for k := range n.subkeys {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make(branch, 0, len(keys))
		for _, k := range keys {
			v, err := conv(n.subkeys[k])
			if err != nil {
				return nil, err
			}
			out = append(out, item{key: k, value: v})
		}
		return out, nil
	}
	v, err := conv(root)
	if err != nil {
		return nil, err
	}
	out, ok := v.(branch)
	if !ok {
		return nil, errors.New("no metadata")
	}
	return out, nil
}

type flatToken struct {
	key    string
	pos    int
	isList bool
}

// tokenize splits a flat key at its "__map_" and "__list_" separators.
func tokenize(k string) []flatToken {
	const mapSep, listSep = "__map_", "__list_"
	var out []flatToken
	start, state := 0, 0 // state: 0 plain, 1 map, 2 list
	finish := func(i int) {
		switch state {
		case 0:
			out = append(out, flatToken{key: k[start:i]})
		case 1:
			out = append(out, flatToken{key: k[start+len(mapSep) : i]})
		case 2:
			n, _ := strconv.Atoi(k[start+len(listSep) : i])
			out = append(out, flatToken{pos: n, isList: true})
		}
		start = i
	}
	for i := 0; i < len(k); {
		switch {
		case strings.HasPrefix(k[i:], mapSep):
			finish(i)
			state = 1
			i += len(mapSep)
		case strings.HasPrefix(k[i:], listSep):
			finish(i)
			state = 2
			i += len(listSep)
		default:
			i++
		}
	}
	finish(len(k))
	return out
}
