// Package sopstest encrypts files the way `sops encrypt` does, through the
// sops module's own API, for the tests of the packages that decrypt them
// (engine/source/decrypt, the operator, the CLI): what they decrypt is
// what sops wrote. Only tests may import it: it links the sops module,
// which package sops does not (see its doc).
package sopstest

import (
	"crypto/rand"
	"io"
	"path"
	"testing"
	"time"

	"filippo.io/age"
	gosops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/logging"
	"github.com/getsops/sops/v3/stores/dotenv"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
)

func init() {
	// sops logs through logrus to stderr; nothing of it may reach the
	// test logs the tests grep for secrets.
	for _, l := range logging.Loggers {
		l.SetOutput(io.Discard)
	}
}

// Identity is a fresh age identity: Secret is the AGE-SECRET-KEY-1...
// line (what a *.agekey entry or SOPS_AGE_KEY_FILE holds), Recipient its
// public key age1....
type Identity struct {
	Secret    string
	Recipient string
}

// NewIdentity generates an age identity.
func NewIdentity(t testing.TB) Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return Identity{Secret: id.String(), Recipient: id.Recipient().String()}
}

// store is the part of a sops store that writes encrypted files.
type store interface {
	LoadPlainFile(in []byte) (gosops.TreeBranches, error)
	EmitEncryptedFile(in gosops.Tree) ([]byte, error)
}

// storeFor is sops's store for the file name, chosen by extension as
// `sops encrypt` chooses it (INI is left out: no test here needs it).
func storeFor(name string) store {
	switch path.Ext(name) {
	case ".yaml", ".yml":
		return sopsyaml.NewStore(&config.YAMLStoreConfig{})
	case ".json":
		return sopsjson.NewStore(&config.JSONStoreConfig{})
	case ".env":
		return dotenv.NewStore(&config.DotenvStoreConfig{})
	}
	return sopsjson.NewBinaryStore(&config.JSONBinaryStoreConfig{})
}

// Encrypt encrypts plain, the content of a file called name, for the age
// recipients (one key group), as `sops encrypt` with its defaults does:
// every value but those under keys ending in _unencrypted.
func Encrypt(t testing.TB, name string, plain []byte, recipients ...string) []byte {
	t.Helper()
	return EncryptRegex(t, name, plain, "", recipients...)
}

// EncryptRegex is Encrypt with an encrypted_regex (Flux's documented
// `^(data|stringData)$` for Secrets): only the values under matching keys
// are encrypted. An empty regex is Encrypt.
func EncryptRegex(t testing.TB, name string, plain []byte, regex string, recipients ...string) []byte {
	t.Helper()
	st := storeFor(name)
	branches, err := st.LoadPlainFile(plain)
	if err != nil {
		t.Fatalf("sopstest: loading plain %s: %v", name, err)
	}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		t.Fatal(err)
	}
	var group gosops.KeyGroup
	for _, r := range recipients {
		mk, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := mk.Encrypt(dataKey); err != nil {
			t.Fatal(err)
		}
		group = append(group, mk)
	}
	meta := gosops.Metadata{KeyGroups: []gosops.KeyGroup{group}, Version: "3.13.3"}
	if regex != "" {
		meta.EncryptedRegex = regex
	} else {
		meta.UnencryptedSuffix = "_unencrypted"
	}
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
