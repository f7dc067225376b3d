package git

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// knownHost is one line of a known_hosts file.
type knownHost struct {
	patterns []string
	key      ssh.PublicKey
	revoked  bool
}

// hostKeyError says why a server's key was not accepted.
type hostKeyError struct {
	host, reason string
}

func (e *hostKeyError) Error() string { return e.host + ": " + e.reason }

// hostKeyCallback checks server keys against known_hosts content, which
// comes from a Secret rather than a file, so x/crypto's file-based checker
// does not fit. It also returns the key algorithms known for addr
// ("host:port"), so that the server is asked for a key it can be checked by.
// Lines marked @cert-authority are not supported and are skipped.
func hostKeyCallback(data []byte, addr string) (ssh.HostKeyCallback, []string, error) {
	hosts, err := parseKnownHosts(data)
	if err != nil {
		return nil, nil, err
	}
	check := func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		return checkHostKey(hosts, knownhosts.Normalize(hostname), key)
	}
	return check, hostKeyAlgorithms(hosts, knownhosts.Normalize(addr)), nil
}

func parseKnownHosts(data []byte) ([]knownHost, error) {
	var hosts []knownHost
	for rest := data; len(rest) > 0; {
		marker, patterns, key, _, next, err := ssh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("known_hosts: %w", err)
		}
		rest = next
		if marker != "" && marker != "revoked" {
			continue
		}
		hosts = append(hosts, knownHost{patterns: patterns, key: key, revoked: marker == "revoked"})
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: known_hosts holds no host key", ErrHostKey)
	}
	return hosts, nil
}

func checkHostKey(hosts []knownHost, host string, key ssh.PublicKey) error {
	known := false
	accepted := false
	for _, h := range hosts {
		if !h.matches(host) {
			continue
		}
		same := bytes.Equal(h.key.Marshal(), key.Marshal())
		if h.revoked && same {
			return &hostKeyError{host, "its key is marked revoked in known_hosts"}
		}
		if !h.revoked {
			known = true
			accepted = accepted || same
		}
	}
	switch {
	case accepted:
		return nil
	case known:
		return &hostKeyError{host, fmt.Sprintf("its %s key %s does not match known_hosts", key.Type(), ssh.FingerprintSHA256(key))}
	}
	return &hostKeyError{host, "it is not in known_hosts"}
}

func hostKeyAlgorithms(hosts []knownHost, host string) []string {
	var algos []string
	for _, h := range hosts {
		if h.revoked || !h.matches(host) {
			continue
		}
		add := []string{h.key.Type()}
		if h.key.Type() == ssh.KeyAlgoRSA {
			add = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, a := range add {
			if !slices.Contains(algos, a) {
				algos = append(algos, a)
			}
		}
	}
	return algos
}

// matches reports whether host (normalised: "host" or "[host]:port")
// matches the line's patterns: plain, wildcard (* and ?), hashed (|1|...),
// with "!" negating.
func (h knownHost) matches(host string) bool {
	matched := false
	for _, p := range h.patterns {
		negated := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		if !matchPattern(p, host) {
			continue
		}
		if negated {
			return false
		}
		matched = true
	}
	return matched
}

func matchPattern(pattern, host string) bool {
	if strings.HasPrefix(pattern, "|1|") {
		return matchHashed(pattern, host)
	}
	return wildcardMatch(strings.ToLower(pattern), strings.ToLower(host))
}

// matchHashed matches a HashKnownHosts entry, |1|base64(salt)|base64(hmac).
func matchHashed(pattern, host string) bool {
	salt64, hash64, ok := strings.Cut(strings.TrimPrefix(pattern, "|1|"), "|")
	if !ok {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(salt64)
	want, err2 := base64.StdEncoding.DecodeString(hash64)
	if err1 != nil || err2 != nil {
		return false
	}
	mac := hmac.New(sha1.New, salt)
	mac.Write([]byte(host))
	return hmac.Equal(mac.Sum(nil), want)
}

// wildcardMatch matches s against a pattern in which * stands for any run
// of characters and ? for one character.
func wildcardMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if wildcardMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		default:
			if len(s) == 0 || s[0] != pattern[0] {
				return false
			}
		}
		pattern, s = pattern[1:], s[1:]
	}
	return len(s) == 0
}
