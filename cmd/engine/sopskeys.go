package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/decrypt"
	"github.com/manifestsync/manifestsync/sops"
)

// sopsKeyFileEnv names the age identity file when --sops-age-key-file is
// not given, as it does for sops itself.
const sopsKeyFileEnv = "SOPS_AGE_KEY_FILE"

// sopsKeyFile is the age identity file of --sops-age-key-file, else of
// SOPS_AGE_KEY_FILE ("" when neither is given): the keys that decrypt
// the SOPS files of a sync file with spec.decryption, as the Secret its
// secretRef names does in the cluster.
type sopsKeyFile string

// addSOPSKeyFlag adds --sops-age-key-file to a command that reads sources.
func addSOPSKeyFlag(fl *pflag.FlagSet, file *string) {
	fl.StringVar(file, "sops-age-key-file", "", "FILE: the age identities (as age-keygen writes them) that decrypt the SOPS files of a ManifestSync with spec.decryption; default: $"+sopsKeyFileEnv)
}

// sopsKeys is the key file flag gives, else the one SOPS_AGE_KEY_FILE
// names.
func sopsKeys(flag string) sopsKeyFile {
	if flag != "" {
		return sopsKeyFile(flag)
	}
	return sopsKeyFile(os.Getenv(sopsKeyFileEnv))
}

// errNoSOPSKey is the usage error of a sync file with spec.decryption and
// no key given: its files would be read encrypted.
var errNoSOPSKey = errors.New("spec.decryption: its sources' SOPS files need an age key: give --sops-age-key-file FILE or set " + sopsKeyFileEnv)

// decrypter returns the source.Resolver's Decrypt hook of sf: nil without
// spec.decryption (the files are read as they are, as the operator reads
// them), else SOPS with the identities of the key file. Without one it
// is errNoSOPSKey. The file's errors name it, never its content.
func (k sopsKeyFile) decrypter(sf *engine.SyncFile) (decrypt.Func, error) {
	d := sf.Sync.Spec.Decryption
	if d == nil {
		return nil, nil
	}
	if d.Provider != "sops" {
		return nil, fmt.Errorf("spec.decryption: provider %q: only sops is supported", d.Provider)
	}
	if k == "" {
		return nil, errNoSOPSKey
	}
	keys, err := k.read()
	if err != nil {
		return nil, err
	}
	return decrypt.SOPS(keys, nil), nil
}

// read reads the identities of the key file, at most
// sops.MaxKeyEntrySize bytes of it.
func (k sopsKeyFile) read() (sops.Keys, error) {
	name := string(k)
	f, err := os.Open(name)
	if err != nil {
		return sops.Keys{}, fmt.Errorf("age key file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, sops.MaxKeyEntrySize+1))
	if err != nil {
		return sops.Keys{}, fmt.Errorf("age key file %s: %w", name, err)
	}
	return sops.ParseKeyFile(name, data)
}

// uiDecrypter is the Decrypt hook of the web UI's diff of ms: nil without
// spec.decryption, else SOPS with the identities of the Secret its
// secretRef names, read as the UI's user (c): one who may not read the
// keys gets the API server's refusal, not a diff of what they decrypt.
func uiDecrypter(ctx context.Context, c client.Reader, ms *v1alpha1.ManifestSync) (decrypt.Func, error) {
	d := ms.Spec.Decryption
	if d == nil {
		return nil, nil
	}
	if d.Provider != "sops" {
		return nil, fmt.Errorf("spec.decryption: provider %q: only sops is supported", d.Provider)
	}
	data, err := uiSecrets(c, ms.Namespace)(ctx, d.SecretRef)
	if err != nil {
		return nil, fmt.Errorf("spec.decryption: %w", err)
	}
	keys, err := sops.ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("spec.decryption: secretRef %s/%s: %w", ms.Namespace, d.SecretRef.Name, err)
	}
	return decrypt.SOPS(keys, nil), nil
}
