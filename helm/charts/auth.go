package charts

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Auth holds the credentials of a helm source.
type Auth struct {
	// Username and Password are sent as basic auth.
	Username, Password string
	// DockerConfigJSON is a .dockerconfigjson; for oci:// the entry of the
	// registry's host is used when there is no Username.
	DockerConfigJSON []byte
	// CABundle holds extra PEM certificates to trust over https.
	CABundle []byte
}

// FromSecretData reads credentials from the data of a Secret, with the keys
// Flux's HelmRepository uses: username and password, or .dockerconfigjson
// (a kubernetes.io/dockerconfigjson Secret), and ca.crt (or caFile) for a
// server whose certificate a private CA signed.
func FromSecretData(data map[string][]byte) *Auth {
	ca := data["ca.crt"]
	if len(ca) == 0 {
		ca = data["caFile"]
	}
	return &Auth{
		Username:         string(data["username"]),
		Password:         string(data["password"]),
		DockerConfigJSON: data[".dockerconfigjson"],
		CABundle:         ca,
	}
}

// Credentials returns the credentials of the Secret a helm source's
// secretRef names: the operator reads it in the ManifestSync's namespace,
// as its service account; the CLI reads NAME.yaml beside the sync file.
// Its errors name the Secret, never its data.
type Credentials func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*Auth, error)

// digest identifies credentials without holding them: caches and fetches
// are told apart by it, so that no caller is served what was read with
// credentials it does not hold.
func (a *Auth) digest() string {
	h := sha256.New()
	if a != nil {
		for _, b := range [][]byte{[]byte(a.Username), []byte(a.Password), a.DockerConfigJSON, a.CABundle} {
			h.Write(b)
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// basic returns the user name and password to send to host: Username and
// Password, else the entry of host in DockerConfigJSON.
func (a *Auth) basic(host string) (user, password string, err error) {
	if a == nil {
		return "", "", nil
	}
	if a.Username != "" || a.Password != "" {
		return a.Username, a.Password, nil
	}
	if len(a.DockerConfigJSON) == 0 {
		return "", "", nil
	}
	var cfg struct {
		Auths map[string]struct {
			Username string `json:"username"`
			Password string `json:"password"`
			Auth     string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(a.DockerConfigJSON, &cfg); err != nil {
		return "", "", errors.New(".dockerconfigjson is not JSON") // its content is secret
	}
	for h, e := range cfg.Auths {
		h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
		h, _, _ = strings.Cut(h, "/")
		if !strings.EqualFold(h, host) {
			continue
		}
		if e.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return "", "", fmt.Errorf(".dockerconfigjson: the auth of %s is not base64", host)
			}
			user, password, _ = strings.Cut(string(dec), ":")
			return user, password, nil
		}
		return e.Username, e.Password, nil
	}
	return "", "", nil
}

// secrets lists what must never appear in a message.
func (a *Auth) secrets() []string {
	if a == nil {
		return nil
	}
	return []string{a.Password, string(a.DockerConfigJSON)}
}

// checkPlain refuses to send credentials over plain http to a host other
// than loopback.
func checkPlain(scheme, host, user, password string) error {
	if scheme == "http" && (user != "" || password != "") && !isLoopback(host) {
		return errors.New("refusing to send credentials over plain http to a host other than loopback; use https")
	}
	return nil
}

func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
