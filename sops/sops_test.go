package sops

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/kms"
	"github.com/getsops/sops/v3/logging"
	"github.com/getsops/sops/v3/pgp"
)

// The plaintext values the fixtures encrypt. None may appear in an error.
const (
	password = "hunter2-correct-horse"
	apiToken = "tok_9f8e7d6c5b4a"
	binBody  = "-----BEGIN PRIVATE THING-----\nc2VjcmV0LWJpbmFyeS1ib2R5\n-----END PRIVATE THING-----\n"
)

// identity is a fresh age identity with its secret and public forms.
type identity struct {
	secret    string // AGE-SECRET-KEY-1...
	recipient string // age1...
	keys      Keys
}

func newIdentity(t *testing.T) identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	ks, err := ParseKeys(map[string][]byte{"identity.agekey": []byte(id.String() + "\n")})
	if err != nil {
		t.Fatal(err)
	}
	return identity{secret: id.String(), recipient: id.Recipient().String(), keys: ks}
}

// plainStore is the part of a sops store that writes encrypted files.
type plainStore interface {
	LoadPlainFile(in []byte) (gosops.TreeBranches, error)
	EmitEncryptedFile(in gosops.Tree) ([]byte, error)
}

// encryptGroups encrypts plain (the content of a file named name) the way
// `sops encrypt` does, through sops's own API: a random data key wrapped
// for every master key of every group (Shamir is not used: one group, or
// each group gets the whole key), the values encrypted with AES-GCM, the
// MAC over them. Values under keys ending in "_unencrypted" stay plain.
// Master keys that are not age keep the EncryptedKey they were given.
func encryptGroups(t testing.TB, name string, plain []byte, groups ...gosops.KeyGroup) []byte {
	t.Helper()
	return encryptWith(t, name, plain, gosops.Metadata{UnencryptedSuffix: "_unencrypted"}, groups...)
}

// encryptWith is encryptGroups with the given encryption rules (suffixes,
// regexes) in meta.
func encryptWith(t testing.TB, name string, plain []byte, meta gosops.Metadata, groups ...gosops.KeyGroup) []byte {
	t.Helper()
	st := storeFor(FormatOf(name)).(plainStore)
	branches, err := st.LoadPlainFile(plain)
	if err != nil {
		t.Fatalf("loading plain %s: %v", name, err)
	}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for _, k := range g {
			if ak, ok := k.(*sopsage.MasterKey); ok {
				if err := ak.Encrypt(dataKey); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	meta.KeyGroups = groups
	meta.Version = "3.13.3" // the sops release that wrote it
	tree := gosops.Tree{Branches: branches, Metadata: meta}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		t.Fatal(err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.EmitEncryptedFile(tree)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// encrypt encrypts plain for the given age recipients, in one key group.
func encrypt(t testing.TB, name string, plain []byte, recipients ...string) []byte {
	t.Helper()
	var g gosops.KeyGroup
	for _, r := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			t.Fatal(err)
		}
		g = append(g, mk)
	}
	return encryptGroups(t, name, plain, g)
}

// assertClean fails when err is nil or says any of the secrets, or the
// secret part of any of the identities.
func assertClean(t *testing.T, err error, ids []identity, secrets ...string) string {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("error says a secret value %q: %s", s, msg)
		}
	}
	for _, id := range ids {
		if strings.Contains(msg, id.secret) || strings.Contains(msg, strings.TrimPrefix(id.secret, "AGE-SECRET-KEY-1")[:20]) {
			t.Errorf("error says key material: %s", msg)
		}
	}
	if strings.Contains(msg, "AGE-SECRET-KEY") || strings.Contains(msg, "ENC[") {
		t.Errorf("error quotes key material or ciphertext: %s", msg)
	}
	return msg
}

const secretManifest = `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: prod
type: Opaque
data:
  password: aHVudGVyMi1jb3JyZWN0LWhvcnNl
stringData:
  token: tok_9f8e7d6c5b4a
`

// Each format decrypts with the right key to what was encrypted, and the
// encrypted form holds none of the plaintext.
func TestDecryptFormats(t *testing.T) {
	id := newIdentity(t)
	for _, c := range []struct {
		name  string
		plain string
		want  []string // values the redactor must get
	}{
		{"app/config.yaml", "db:\n    password: " + password + "\n    port: 5432\n", []string{password, "5432"}},
		{"app/config.yml", "token: " + apiToken + "\n", []string{apiToken}},
		{"app/config.json", `{"db":{"password":"` + password + `","replicas":[1,2]},"token":"` + apiToken + `"}`, []string{password, apiToken}},
		{"app/secrets.env", "PASSWORD=" + password + "\nTOKEN=" + apiToken + "\n", []string{password, apiToken}},
		{"app/secrets.ini", "[db]\npassword = " + password + "\n", []string{password}},
		{"app/tls.key", binBody, []string{binBody}},
	} {
		t.Run(c.name, func(t *testing.T) {
			enc := encrypt(t, c.name, []byte(c.plain), id.recipient)
			for _, v := range c.want {
				if bytes.Contains(enc, []byte(v)) {
					t.Fatalf("the encrypted file holds %q:\n%s", v, enc)
				}
			}
			if !IsEncrypted(c.name, enc) {
				t.Fatalf("IsEncrypted(%s) = false:\n%s", c.name, enc)
			}
			if IsEncrypted(c.name, []byte(c.plain)) {
				t.Fatalf("IsEncrypted(plain %s) = true", c.name)
			}
			got, err := Decrypt(c.name, enc, id.keys)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range c.want {
				if !bytes.Contains(got, []byte(v)) {
					t.Errorf("plaintext lacks %q:\n%s", v, got)
				}
			}
			if bytes.Contains(got, []byte("sops")) || bytes.Contains(got, []byte("ENC[")) {
				t.Errorf("plaintext keeps sops metadata or ciphertext:\n%s", got)
			}
			if FormatOf(c.name) == Binary && string(got) != c.plain {
				t.Errorf("binary plaintext = %q, want %q", got, c.plain)
			}
			_, vals, err := DecryptFiles(map[string][]byte{c.name: enc}, id.keys)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range c.want {
				if !slices.Contains(vals, v) {
					t.Errorf("values for the redactor %q lack %q", vals, v)
				}
			}
		})
	}
}

// An encrypted Secret manifest decrypts to the manifest, and its data and
// stringData values (data also decoded) go to the redactor.
func TestSecretManifest(t *testing.T) {
	id := newIdentity(t)
	enc := encrypt(t, "prod/db-secret.yaml", []byte(secretManifest), id.recipient)
	out, vals, err := DecryptFiles(map[string][]byte{
		"prod/db-secret.yaml":     enc,
		"prod/kustomization.yaml": []byte("resources: [db-secret.yaml]\n"),
	}, id.keys)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out["prod/db-secret.yaml"])
	for _, want := range []string{"kind: Secret", "password: aHVudGVyMi1jb3JyZWN0LWhvcnNl", "token: " + apiToken, "name: db"} {
		if !strings.Contains(got, want) {
			t.Errorf("decrypted manifest lacks %q:\n%s", want, got)
		}
	}
	for _, want := range []string{"aHVudGVyMi1jb3JyZWN0LWhvcnNl", password, apiToken} {
		if !slices.Contains(vals, want) {
			t.Errorf("values for the redactor %q lack %q", vals, want)
		}
	}
	// metadata, kind and type were encrypted too (no encrypted_regex), so
	// they are among the values; the point is that the Secret's are.
	if string(out["prod/kustomization.yaml"]) != "resources: [db-secret.yaml]\n" {
		t.Errorf("plain file changed: %q", out["prod/kustomization.yaml"])
	}
}

// The way Flux's guide encrypts Secrets (encrypted_regex:
// ^(data|stringData)$): the rest stays plain, the MAC still covers it, and
// only the encrypted values go to the redactor.
func TestSecretManifestEncryptedRegex(t *testing.T) {
	id := newIdentity(t)
	mk, err := sopsage.MasterKeyFromRecipient(id.recipient)
	if err != nil {
		t.Fatal(err)
	}
	enc := encryptWith(t, "s.yaml", []byte(secretManifest), gosops.Metadata{EncryptedRegex: "^(data|stringData)$"}, gosops.KeyGroup{mk})
	if !bytes.Contains(enc, []byte("name: db")) || bytes.Contains(enc, []byte(apiToken)) {
		t.Fatalf("encrypted_regex did not encrypt only data and stringData:\n%s", enc)
	}
	out, vals, err := DecryptFiles(map[string][]byte{"s.yaml": enc}, id.keys)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out["s.yaml"], []byte("token: "+apiToken)) {
		t.Errorf("not decrypted:\n%s", out["s.yaml"])
	}
	want := []string{"aHVudGVyMi1jb3JyZWN0LWhvcnNl", password, apiToken}
	slices.Sort(want)
	if !slices.Equal(vals, want) {
		t.Errorf("values for the redactor = %q, want %q", vals, want)
	}
	// A hostile edit of a plain field (the namespace) breaks the MAC.
	_, err = Decrypt("s.yaml", bytes.Replace(enc, []byte("namespace: prod"), []byte("namespace: kube-system"), 1), id.keys)
	if msg := assertClean(t, err, []identity{id}, password, apiToken); !strings.Contains(msg, "MAC mismatch") {
		t.Errorf("edited namespace: %s", msg)
	}
}

// A hostile or mistaken file gets an error that names the file and the key
// group's age recipients, and never a value, a line of the file or key
// material: a wrong key, a tampered MAC, a changed plain value, a removed
// value, a changed ciphertext.
func TestDecryptFailures(t *testing.T) {
	right, wrong := newIdentity(t), newIdentity(t)
	ids := []identity{right, wrong}
	const name = "prod/db-secret.yaml"
	plain := secretManifest + "note_unencrypted: keep me\n"
	enc := encrypt(t, name, []byte(plain), right.recipient)
	other := encrypt(t, name, []byte(plain), right.recipient) // another data key

	macRe := regexp.MustCompile(`(?m)^    mac: (.*)$`)
	otherMac := macRe.FindSubmatch(other)[1]
	cipherRe := regexp.MustCompile(`ENC\[AES256_GCM,data:([^,]+),`)

	for _, c := range []struct {
		what string
		data []byte
		keys Keys
		want string
	}{
		{"wrong key", enc, wrong.keys, "no age key given opens key group 1 (age recipients " + right.recipient + ")"},
		{"no key", enc, Keys{}, "no age key given (the file needs one of key group 1 (age recipients " + right.recipient + "))"},
		{"MAC from another file", macRe.ReplaceAll(bytes.Clone(enc), []byte("    mac: "+string(otherMac))), right.keys, "its MAC does not decrypt"},
		{"plain value changed", bytes.Replace(enc, []byte("keep me"), []byte("keep it"), 1), right.keys, "MAC mismatch"},
		{"encrypted value removed", regexp.MustCompile(`(?m)^    token: .*\n`).ReplaceAll(bytes.Clone(enc), nil), right.keys, "MAC mismatch"},
		{"ciphertext changed", cipherRe.ReplaceAllFunc(bytes.Clone(enc), func(m []byte) []byte {
			// Flip the first base64 character of the first value: the
			// GCM tag no longer matches.
			b := bytes.Clone(m)
			i := len("ENC[AES256_GCM,data:")
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			return b
		}), right.keys, "a value does not decrypt"},
	} {
		t.Run(c.what, func(t *testing.T) {
			if bytes.Equal(c.data, enc) && c.what != "wrong key" && c.what != "no key" {
				t.Fatal("the tampering changed nothing")
			}
			_, err := Decrypt(name, c.data, c.keys)
			msg := assertClean(t, err, ids, password, apiToken, "aHVudGVyMi1jb3JyZWN0LWhvcnNl", "keep")
			if !strings.Contains(msg, `"`+name+`"`) {
				t.Errorf("error does not name the file: %s", msg)
			}
			if !strings.Contains(msg, right.recipient) {
				t.Errorf("error does not name the key group's recipient: %s", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("error = %s\nwant it to say %q", msg, c.want)
			}
			// Only a file no key given opens is ErrNoKey: one a key opens
			// but that was changed is not.
			if noKey := c.what == "wrong key" || c.what == "no key"; errors.Is(err, ErrNoKey) != noKey {
				t.Errorf("errors.Is(err, ErrNoKey) = %v, want %v", !noKey, noKey)
			}
			// Through DecryptFiles: nothing is returned with the error.
			out, vals, err := DecryptFiles(map[string][]byte{name: c.data, "plain.yaml": []byte("a: b\n")}, c.keys)
			assertClean(t, err, ids, password, apiToken)
			if out != nil || vals != nil {
				t.Errorf("DecryptFiles returned files or values with its error")
			}
		})
	}
}

// A file encrypted only for KMS, PGP or Vault is refused without reaching
// any of them, naming the provider; a group mixing age and KMS opens with
// the age key and names the KMS key as unused when it does not.
func TestOtherProvidersRefused(t *testing.T) {
	id, wrong := newIdentity(t), newIdentity(t)
	kmsKey := kms.NewMasterKeyFromArn("arn:aws:kms:eu-west-1:111122223333:key/0000-1111", nil, "")
	kmsKey.EncryptedKey = base64.StdEncoding.EncodeToString([]byte("not a real wrapped key"))
	pgpKey := pgp.NewMasterKeyFromFingerprint("FBC7B9E2A4F9289AC0C1D4843D16CEE4A27381B4")
	pgpKey.EncryptedKey = "-----BEGIN PGP MESSAGE-----\nnot real\n-----END PGP MESSAGE-----"

	for _, c := range []struct {
		what  string
		group gosops.KeyGroup
		want  string
	}{
		{"kms", gosops.KeyGroup{kmsKey}, "encrypted for kms only: only age keys are supported"},
		{"pgp", gosops.KeyGroup{pgpKey}, "encrypted for pgp only: only age keys are supported"},
		{"kms and pgp", gosops.KeyGroup{kmsKey, pgpKey}, "encrypted for kms, pgp only"},
	} {
		t.Run(c.what, func(t *testing.T) {
			enc := encryptGroups(t, "s.yaml", []byte("password: "+password+"\n"), c.group)
			start := time.Now()
			_, err := Decrypt("s.yaml", enc, id.keys)
			msg := assertClean(t, err, []identity{id}, password)
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, `"s.yaml"`) {
				t.Errorf("error = %s\nwant it to name the file and say %q", msg, c.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("refusing took %v: something reached out", d)
			}
		})
	}

	ak, err := sopsage.MasterKeyFromRecipient(id.recipient)
	if err != nil {
		t.Fatal(err)
	}
	enc := encryptGroups(t, "s.yaml", []byte("password: "+password+"\n"), gosops.KeyGroup{kmsKey, ak})
	got, err := Decrypt("s.yaml", enc, id.keys)
	if err != nil || !bytes.Contains(got, []byte(password)) {
		t.Fatalf("mixed group with the age key: %q, %v", got, err)
	}
	_, err = Decrypt("s.yaml", enc, wrong.keys)
	msg := assertClean(t, err, []identity{id, wrong}, password)
	if !strings.Contains(msg, id.recipient) || !strings.Contains(msg, "kms not used: only age keys are supported") {
		t.Errorf("mixed group, wrong key: %s", msg)
	}
}

// The environment sops reads by itself (SOPS_AGE_KEY_FILE, SOPS_AGE_KEY,
// ~/.config/sops/age/keys.txt) is never used: with the right key only
// there, decryption fails.
func TestNoAmbientKeys(t *testing.T) {
	id, wrong := newIdentity(t), newIdentity(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(keyFile, []byte(id.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".config", "sops", "age"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".config", "sops", "age", "keys.txt"), []byte(id.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY_FILE", keyFile)
	t.Setenv("SOPS_AGE_KEY", id.secret)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, ".config"))
	enc := encrypt(t, "s.yaml", []byte("password: "+password+"\n"), id.recipient)
	for _, ks := range []Keys{{}, wrong.keys} {
		if _, err := Decrypt("s.yaml", enc, ks); err == nil {
			t.Fatalf("decrypted with keys %v: the ambient key was used", ks)
		} else {
			assertClean(t, err, []identity{id, wrong}, password)
		}
	}
}

// An unencrypted file passes untouched (the same bytes), including one
// that only mentions sops, and a broken file that looks like sops.
func TestPlainFilesUntouched(t *testing.T) {
	id := newIdentity(t)
	files := map[string][]byte{
		"a.yaml":      []byte("apiVersion: v1\nkind: ConfigMap\ndata:\n  sops: mac\n"),
		"b.json":      []byte(`{"sops": "not metadata", "mac": 1}`),
		"c.env":       []byte("SOPS=mac\n"),
		"README.md":   []byte("# how to run sops with a mac\n"),
		"broken.yaml": []byte("sops: [mac\n"),
		"big.yaml":    bytes.Repeat([]byte("# padding sops mac\n"), MaxFileSize/10),
	}
	out, vals, err := DecryptFiles(files, id.keys)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 0 {
		t.Errorf("values from plain files: %q", vals)
	}
	for name, data := range files {
		if IsEncrypted(name, data) {
			t.Errorf("IsEncrypted(%s) = true", name)
		}
		if got := out[name]; !bytes.Equal(got, data) || (len(data) > 0 && &got[0] != &data[0]) {
			t.Errorf("%s was changed or copied", name)
		}
	}
}

// A hostile snapshot is bounded: an encrypted file over MaxFileSize, more
// than MaxFiles encrypted files, or sops values with their metadata cut
// off are refused, naming the file.
func TestBounds(t *testing.T) {
	id := newIdentity(t)
	small := encrypt(t, "s.yaml", []byte("password: "+password+"\n"), id.recipient)

	// Over the size limit: the value is padded past 1 MiB before encryption.
	big := encrypt(t, "big.yaml", []byte("pad: "+strings.Repeat("x", MaxFileSize)+"\npassword: "+password+"\n"), id.recipient)
	_, _, err := DecryptFiles(map[string][]byte{"big.yaml": big}, id.keys)
	if msg := assertClean(t, err, []identity{id}, password); !strings.Contains(msg, `"big.yaml": larger than 1048576 bytes`) {
		t.Errorf("big file: %s", msg)
	}
	if _, err := Decrypt("big.yaml", big, id.keys); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Decrypt of a big file: %v", err)
	}
	if IsEncrypted("big.yaml", big) {
		t.Error("IsEncrypted parsed a file over the limit")
	}

	// Too many encrypted files: the same content under MaxFiles+1 names.
	many := map[string][]byte{}
	for i := range MaxFiles + 1 {
		many[fmt.Sprintf("s%04d.yaml", i)] = small
	}
	_, _, err = DecryptFiles(many, id.keys)
	if msg := assertClean(t, err, []identity{id}, password); !strings.Contains(msg, "more than 1000 encrypted files") {
		t.Errorf("many files: %s", msg)
	}

	// Too many master keys: each would cost a key agreement per identity.
	var recipients []string
	for range MaxMasterKeys + 1 {
		recipients = append(recipients, newIdentity(t).recipient)
	}
	crowded := encrypt(t, "s.yaml", []byte("password: "+password+"\n"), recipients...)
	_, err = Decrypt("s.yaml", crowded, id.keys)
	if msg := assertClean(t, err, []identity{id}, password); !strings.Contains(msg, `"s.yaml": lists 65 master keys, more than 64`) {
		t.Errorf("many master keys: %s", msg)
	}

	// Metadata cut off: the ENC values would otherwise be applied as they are.
	cut := small[:bytes.Index(small, []byte("sops:"))]
	_, _, err = DecryptFiles(map[string][]byte{"s.yaml": cut}, id.keys)
	if msg := assertClean(t, err, []identity{id}, password); !strings.Contains(msg, `"s.yaml": has sops-encrypted values but no sops metadata`) {
		t.Errorf("cut metadata: %s", msg)
	}
}

// Keys read age identity files as age-keygen writes them: comments, blank
// lines, several keys, several *.agekey entries; other entries are
// ignored; a malformed line is named by its number, never quoted.
func TestParseKeys(t *testing.T) {
	a, b, c := newIdentity(t), newIdentity(t), newIdentity(t)
	ks, err := ParseKeys(map[string][]byte{
		"one.agekey":       []byte("# created: 2026-01-01T00:00:00Z\n# public key: " + a.recipient + "\n" + a.secret + "\n\n" + b.secret + "\r\n"),
		"two.agekey":       []byte("  " + c.secret + "  \n" + a.secret + "\n"),
		"pgp.asc":          []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\n"),
		"sops.vault-token": []byte("s.xxxx"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ks.Len() != 3 {
		t.Errorf("Len = %d, want 3 (a duplicate is kept once)", ks.Len())
	}
	if want := []string{a.recipient, b.recipient, c.recipient}; !slices.Equal(ks.Recipients(), want) {
		t.Errorf("Recipients = %q, want %q", ks.Recipients(), want)
	}
	for _, s := range []string{fmt.Sprint(ks), fmt.Sprintf("%v %+v %#v %s", ks, ks, ks, ks)} {
		if strings.Contains(s, "AGE-SECRET-KEY") {
			t.Errorf("Keys print key material: %s", s)
		}
	}
	// Each identity opens its own files.
	for _, id := range []identity{a, b, c} {
		enc := encrypt(t, "s.json", []byte(`{"password":"`+password+`"}`), id.recipient)
		if _, err := Decrypt("s.json", enc, ks); err != nil {
			t.Errorf("key %s: %v", id.recipient, err)
		}
	}

	corrupt := a.secret[:len(a.secret)-3] + "QQQ"
	for _, c := range []struct {
		entries map[string][]byte
		want    string
	}{
		{map[string][]byte{"k.agekey": []byte("# ok\n" + corrupt + "\n")}, `age key "k.agekey": line 2: not an age identity`},
		{map[string][]byte{"k.agekey": []byte("ssh-ed25519 AAAA\n")}, `age key "k.agekey": line 1: not an age identity`},
		{map[string][]byte{"k.agekey": []byte("# only a comment\n\n")}, `age key "k.agekey": no age identity`},
		{map[string][]byte{"identity.asc": []byte(a.secret)}, "no .agekey entry"},
		{map[string][]byte{"k.agekey": bytes.Repeat([]byte("#"), MaxKeyEntrySize+1)}, "larger than 65536 bytes"},
	} {
		_, err := ParseKeys(c.entries)
		msg := assertClean(t, err, []identity{a}, corrupt[16:40])
		if !strings.Contains(msg, c.want) {
			t.Errorf("error = %s, want %q", msg, c.want)
		}
	}
}

// sops's loggers write nowhere: a warning in its tree decryption quotes a
// comment's text, which may be a secret.
func TestSopsLogsSilenced(t *testing.T) {
	if len(logging.Loggers) == 0 {
		t.Fatal("no sops logger registered: the check proves nothing")
	}
	for name, l := range logging.Loggers {
		if l.Out != io.Discard {
			t.Errorf("sops logger %s writes to %v", name, l.Out)
		}
	}
}

// FuzzDecrypt: any file, in any format, is an error or a plaintext, never
// a panic (the store parsers are recovered) nor a hang.
func FuzzDecrypt(f *testing.F) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		f.Fatal(err)
	}
	ks, err := ParseKeyFile("fuzz", []byte(id.String()))
	if err != nil {
		f.Fatal(err)
	}
	for name, plain := range map[string]string{
		"a.yaml": "password: " + password + "\n",
		"a.json": `{"password": "` + password + `"}`,
		"a.env":  "PASSWORD=" + password + "\n",
		"a.ini":  "[s]\npassword = " + password + "\n",
		"a.bin":  password,
	} {
		f.Add(name, encrypt(f, name, []byte(plain), id.Recipient().String()))
	}
	f.Add("a.yaml", []byte("sops: {mac: x, version: 3}\nx: ENC[AES256_GCM,data:,iv:,tag:,type:str]\n"))
	f.Add("a.env", []byte("sops_mac=x\nsops_version=3\nA=ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\n"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		out, _, err := DecryptFiles(map[string][]byte{name: data}, ks)
		if err == nil && out[name] == nil && data != nil {
			t.Fatal("no error and no file")
		}
		_ = IsEncrypted(name, data)
	})
}
