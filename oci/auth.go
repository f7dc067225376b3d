package oci

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// credentials are those of one registry, read from a .dockerconfigjson.
type credentials struct {
	cfg authn.AuthConfig
}

func (c *credentials) set() bool { return c != nil && c.cfg != (authn.AuthConfig{}) }

func (c *credentials) authenticator() authn.Authenticator {
	if !c.set() {
		return authn.Anonymous
	}
	return authn.FromConfig(c.cfg)
}

// digest identifies credentials without holding them, so that pullers
// of different credentials are never shared.
func (c *credentials) digest() string {
	h := sha256.New()
	if c != nil {
		for _, s := range []string{c.cfg.Username, c.cfg.Password, c.cfg.Auth, c.cfg.IdentityToken, c.cfg.RegistryToken} {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// credentialsFor returns the entry of host in a .dockerconfigjson (docker
// login's format: auths keyed by host, or by a URL of it), or none. Its
// errors never quote the content.
func credentialsFor(dockerConfig []byte, host string) (*credentials, error) {
	if len(dockerConfig) == 0 {
		return &credentials{}, nil
	}
	var cfg struct {
		Auths map[string]struct {
			Username      string `json:"username"`
			Password      string `json:"password"`
			Auth          string `json:"auth"`
			IdentityToken string `json:"identitytoken"`
			RegistryToken string `json:"registrytoken"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(dockerConfig, &cfg); err != nil {
		return nil, errors.New("credentials: not a .dockerconfigjson (JSON with auths)")
	}
	for h, e := range cfg.Auths {
		h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
		h, _, _ = strings.Cut(h, "/")
		if !strings.EqualFold(h, host) {
			continue
		}
		c := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
		if e.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("credentials: the auth of %s is not base64", host)
			}
			user, password, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("credentials: the auth of %s is not USER:PASSWORD", host)
			}
			c.Username, c.Password = user, password
		}
		return &credentials{cfg: c}, nil
	}
	return &credentials{}, nil
}

// isLoopback reports whether host (host or host:port) is a loopback
// address or localhost.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
