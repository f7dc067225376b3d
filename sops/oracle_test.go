package sops

import (
	"io"

	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/logging"
	"github.com/getsops/sops/v3/stores/dotenv"
	"github.com/getsops/sops/v3/stores/ini"
	sopsjson "github.com/getsops/sops/v3/stores/json"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
)

// The sops module is the tests' oracle: they encrypt (and, in
// oracle_compare_test.go, decrypt) with sops's own stores and tree code,
// so that every run checks this package's reader against sops. The
// package itself does not link the module (but for its shamir package).

func init() {
	// sops logs through logrus to stderr; a warning in its tree decryption
	// quotes a comment that does not decrypt. Nothing of it may reach the
	// test logs.
	for _, l := range logging.Loggers {
		l.SetOutput(io.Discard)
	}
}

// storeFor is sops's own store for a format, as `sops encrypt` picks it.
func storeFor(f Format) any {
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
