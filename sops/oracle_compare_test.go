package sops

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/shamir"
)

// oracleStore is the part of a sops store that reads an encrypted file and
// writes its plaintext.
type oracleStore interface {
	LoadEncryptedFile(in []byte) (gosops.Tree, error)
	EmitPlainFile(in gosops.TreeBranches) ([]byte, error)
}

// oracleDecrypt decrypts enc with sops's own code: its store, its age key
// source (with the identity handed in), its tree decryption and MAC check.
func oracleDecrypt(t *testing.T, name string, enc []byte, secrets ...string) []byte {
	t.Helper()
	st := storeFor(FormatOf(name)).(oracleStore)
	tree, err := st.LoadEncryptedFile(enc)
	if err != nil {
		t.Fatalf("sops loading %s: %v", name, err)
	}
	var ids sopsage.ParsedIdentities
	if err := ids.Import(secrets...); err != nil {
		t.Fatal(err)
	}
	var parts [][]byte
	for _, g := range tree.Metadata.KeyGroups {
		for _, k := range g {
			if ak, ok := k.(*sopsage.MasterKey); ok {
				ids.ApplyToMasterKey(ak)
				if p, err := ak.Decrypt(); err == nil {
					parts = append(parts, p)
					break
				}
			}
		}
	}
	var key []byte
	switch {
	case len(tree.Metadata.KeyGroups) > 1:
		if key, err = shamir.Combine(parts); err != nil {
			t.Fatal(err)
		}
	case len(parts) == 1:
		key = parts[0]
	default:
		t.Fatal("sops opens no data key")
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(key, cipher)
	if err != nil {
		t.Fatalf("sops decrypting %s: %v", name, err)
	}
	want, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, key, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || want != mac {
		t.Fatalf("sops MAC check of %s: %v", name, err)
	}
	out, err := st.EmitPlainFile(tree.Branches)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// encryptShamir encrypts plain the way `sops encrypt --shamir-secret-sharing-threshold`
// does: the data key is split into one share a group, each share wrapped
// for the group's age recipients.
func encryptShamir(t *testing.T, name string, plain []byte, threshold int, groups ...[]string) []byte {
	t.Helper()
	st := storeFor(FormatOf(name)).(plainStore)
	branches, err := st.LoadPlainFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		t.Fatal(err)
	}
	shares, err := shamir.Split(dataKey, len(groups), threshold)
	if err != nil {
		t.Fatal(err)
	}
	meta := gosops.Metadata{UnencryptedSuffix: "_unencrypted", ShamirThreshold: threshold, Version: "3.13.3"}
	for i, g := range groups {
		var kg gosops.KeyGroup
		for _, r := range g {
			mk, err := sopsage.MasterKeyFromRecipient(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := mk.Encrypt(shares[i]); err != nil {
				t.Fatal(err)
			}
			kg = append(kg, mk)
		}
		meta.KeyGroups = append(meta.KeyGroups, kg)
	}
	tree := gosops.Tree{Branches: branches, Metadata: meta}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	if tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339)); err != nil {
		t.Fatal(err)
	}
	out, err := st.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const richYAML = `# the head of the file
apiVersion: v1 # an inline comment
kind: Secret
metadata:
    name: db
    labels:
        app: db
data:
    # about the password
    password: aHVudGVyMi1jb3JyZWN0LWhvcnNl
    port: 5432
    ratio: 0.25
    big: 1e+30
    enabled: true
    disabled: false
    empty: ""
    nothing: null
    multi: |
        line one
        line two
    list:
        - a # first
        - 2
        - 3.5
        - false
        # before a map
        - nested:
            deep: [x, y]
        - - inner
          - 7
    settings_unencrypted:
        keep: plain
        n: 3
stringData:
    token: tok_9f8e7d6c5b4a
# a foot comment
---
second: document
n: 1
items: [1, two, 3.0]
`

// The reader decrypts what sops encrypts, under every encryption rule a
// file can carry, to the very bytes sops's own decryption writes: nested
// maps and lists, ints, floats, bools, nulls, empty strings, comments
// (encrypted too), several YAML documents, and each format.
func TestMatchesSops(t *testing.T) {
	id := newIdentity(t)
	mk := func() gosops.KeyGroup {
		k, err := sopsage.MasterKeyFromRecipient(id.recipient)
		if err != nil {
			t.Fatal(err)
		}
		return gosops.KeyGroup{k}
	}
	for _, c := range []struct {
		what, name, plain string
		meta              gosops.Metadata
	}{
		{"yaml default", "a.yaml", richYAML, gosops.Metadata{UnencryptedSuffix: "_unencrypted"}},
		{"yaml encrypted_regex", "a.yaml", richYAML, gosops.Metadata{EncryptedRegex: "^(data|stringData)$"}},
		{"yaml unencrypted_regex", "a.yaml", richYAML, gosops.Metadata{UnencryptedRegex: "^(metadata|kind)$"}},
		{"yaml encrypted_suffix", "a.yaml", "db_secret:\n    password: x\n    port: 1\nplain: y\n", gosops.Metadata{EncryptedSuffix: "_secret"}},
		{"yaml unencrypted_suffix", "a.yaml", "db_plain:\n    host: h\npassword: x\n", gosops.Metadata{UnencryptedSuffix: "_plain"}},
		{"yaml mac_only_encrypted", "a.yaml", richYAML, gosops.Metadata{EncryptedRegex: "^data$", MACOnlyEncrypted: true}},
		{"yaml encrypted_comment_regex", "a.yaml", "a: 1\n# sops:enc\nb: secret\nc: plain\nl:\n    # sops:enc\n    - s\n    - p\n", gosops.Metadata{EncryptedCommentRegex: "sops:enc"}},
		{"yaml unencrypted_comment_regex", "a.yaml", "a: 1\n# sops:plain\nb: open\nc: secret\n", gosops.Metadata{UnencryptedCommentRegex: "sops:plain"}},
		{"json", "a.json", `{"a":{"b":[1,2.5,true,null,"s",{"c":"d"},[1,[2]]]},"e":"","f":1e100,"g":-0.5,"h_unencrypted":"x","u":"\u00e9\n"}`, gosops.Metadata{UnencryptedSuffix: "_unencrypted"}},
		{"json encrypted_regex", "a.json", `{"data":{"k":"v","n":2},"other":{"k":"v"}}`, gosops.Metadata{EncryptedRegex: "^data$"}},
		{"dotenv", "a.env", "# a comment\nA=1\nB=two words\nC=multi\\nline\nD_unencrypted=plain\nE=\n", gosops.Metadata{UnencryptedSuffix: "_unencrypted"}},
		{"ini", "a.ini", "; top\n[db]\n; about the host\nhost = h\nport = 5432\n\n[other]\nk = v ; inline\nk_unencrypted = x\n", gosops.Metadata{UnencryptedSuffix: "_unencrypted"}},
		{"binary", "a.bin", "\xff\x00 raw bytes\n", gosops.Metadata{UnencryptedSuffix: "_unencrypted"}},
	} {
		t.Run(c.what, func(t *testing.T) {
			enc := encryptWith(t, c.name, []byte(c.plain), c.meta, mk())
			want := oracleDecrypt(t, c.name, enc, id.secret)
			got, err := Decrypt(c.name, enc, id.keys)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("plaintext differs from sops's\n--- ours\n%s\n--- sops\n%s", got, want)
			}
		})
	}
}

// With mac_only_encrypted, the MAC covers the encrypted values only: a
// changed plain value passes (as with sops), a changed encrypted one does
// not.
func TestMacOnlyEncrypted(t *testing.T) {
	id := newIdentity(t)
	k, err := sopsage.MasterKeyFromRecipient(id.recipient)
	if err != nil {
		t.Fatal(err)
	}
	enc := encryptWith(t, "s.yaml", []byte(secretManifest), gosops.Metadata{EncryptedRegex: "^data$", MACOnlyEncrypted: true}, gosops.KeyGroup{k})
	edited := bytes.Replace(enc, []byte("namespace: prod"), []byte("namespace: kube-system"), 1)
	got, err := Decrypt("s.yaml", edited, id.keys)
	if err != nil || !bytes.Contains(got, []byte("namespace: kube-system")) {
		t.Fatalf("an edited plain value under mac_only_encrypted: %v", err)
	}
	if want := oracleDecrypt(t, "s.yaml", edited, id.secret); !bytes.Equal(got, want) {
		t.Errorf("differs from sops:\n%s\n---\n%s", got, want)
	}
	// Without the flag, the same edit breaks the MAC (the flag is read).
	plainMac := encryptWith(t, "s.yaml", []byte(secretManifest), gosops.Metadata{EncryptedRegex: "^data$"}, gosops.KeyGroup{k})
	_, err = Decrypt("s.yaml", bytes.Replace(plainMac, []byte("namespace: prod"), []byte("namespace: kube-system"), 1), id.keys)
	if msg := assertClean(t, err, []identity{id}, password); !strings.Contains(msg, "MAC mismatch") {
		t.Errorf("edited plain value: %s", msg)
	}
}

// Several key groups are Shamir shares: a threshold of the groups opens
// the file, fewer do not, and the error names every group.
func TestShamirKeyGroups(t *testing.T) {
	a, b, c := newIdentity(t), newIdentity(t), newIdentity(t)
	enc := encryptShamir(t, "s.yaml", []byte("password: "+password+"\n"), 2, []string{a.recipient}, []string{b.recipient}, []string{c.recipient})
	two, err := a.keys.Merge(c.keys)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decrypt("s.yaml", enc, two)
	if err != nil {
		t.Fatal(err)
	}
	if want := oracleDecrypt(t, "s.yaml", enc, a.secret, c.secret); !bytes.Equal(got, want) {
		t.Errorf("differs from sops:\n%s\n---\n%s", got, want)
	}
	_, err = Decrypt("s.yaml", enc, b.keys)
	msg := assertClean(t, err, []identity{a, b, c}, password)
	for _, want := range []string{"key group 1 (age recipients " + a.recipient, "key group 3 (age recipients " + c.recipient} {
		if !strings.Contains(msg, want) {
			t.Errorf("one share of two: %s\nwant it to say %q", msg, want)
		}
	}
}

// The values for the redactor are the encrypted ones, whatever their type,
// with a Secret's data decoded; a plain value is not among them.
func TestRedactorValues(t *testing.T) {
	id := newIdentity(t)
	k, err := sopsage.MasterKeyFromRecipient(id.recipient)
	if err != nil {
		t.Fatal(err)
	}
	enc := encryptWith(t, "a.yaml", []byte(richYAML), gosops.Metadata{EncryptedRegex: "^(data|stringData)$"}, gosops.KeyGroup{k})
	_, vals, err := DecryptFiles(map[string][]byte{"a.yaml": enc}, id.keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{password, "aHVudGVyMi1jb3JyZWN0LWhvcnNl", apiToken, "5432", "0.25", "true", "false", "line one\nline two\n", "inner", "x", " about the password", " first"} {
		if !slices.Contains(vals, want) {
			t.Errorf("values for the redactor %q lack %q", vals, want)
		}
	}
	for _, plain := range []string{"db", "Secret", "v1", "document"} {
		if slices.Contains(vals, plain) {
			t.Errorf("values for the redactor hold the plain value %q", plain)
		}
	}
}

// A later YAML document with an alias bomb or an alias to itself (sops
// checks the first document only) is refused at once, not expanded.
func TestYAMLAliasesBounded(t *testing.T) {
	id := newIdentity(t)
	enc := encrypt(t, "a.yaml", []byte("password: "+password+"\n"), id.recipient)
	var bomb strings.Builder
	bomb.WriteString("---\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		fmt.Fprintf(&bomb, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, later := range []string{bomb.String(), "---\nself: &s [*s]\n"} {
		data := append(bytes.Clone(enc), later...)
		done := make(chan error, 1)
		go func() {
			_, err := Decrypt("a.yaml", data, id.keys)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("a later document with aliases decrypted")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a later document with aliases was expanded (no answer in 10s)")
		}
	}
}
