package git

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// Auth holds the credentials of a Git source.
type Auth struct {
	// Username and Password are sent as basic auth over https. Over ssh,
	// Password is used for password authentication when there is no
	// SSHIdentity.
	Username, Password string
	// BearerToken is sent as "Authorization: Bearer" over https; it wins
	// over Username and Password.
	BearerToken string
	// SSHIdentity is a PEM or OpenSSH private key, SSHPassphrase its
	// passphrase if it is encrypted.
	SSHIdentity, SSHPassphrase []byte
	// KnownHosts is in OpenSSH known_hosts format; ssh needs it.
	KnownHosts []byte
	// CABundle holds extra PEM certificates to trust over https.
	CABundle []byte
}

// FromSecretData reads credentials from the data of a Secret, with the keys
// Flux uses: username, password, bearerToken, identity (or ssh-privatekey,
// as in a kubernetes.io/ssh-auth Secret), known_hosts and ca.crt (or
// caFile). The passphrase of an identity is read from passphrase, else
// from password.
func FromSecretData(data map[string][]byte) *Auth {
	a := &Auth{
		Username:      string(data["username"]),
		Password:      string(data["password"]),
		BearerToken:   string(data["bearerToken"]),
		SSHIdentity:   firstSet(data["identity"], data["ssh-privatekey"]),
		SSHPassphrase: data["passphrase"],
		KnownHosts:    data["known_hosts"],
		CABundle:      firstSet(data["ca.crt"], data["caFile"]),
	}
	if len(a.SSHIdentity) > 0 && len(a.SSHPassphrase) == 0 {
		a.SSHPassphrase = data["password"]
	}
	return a
}

func firstSet(bs ...[]byte) []byte {
	for _, b := range bs {
		if len(b) > 0 {
			return b
		}
	}
	return nil
}

// secrets lists what must never appear in a message.
func (a *Auth) secrets() []string {
	if a == nil {
		return nil
	}
	return []string{a.Password, a.BearerToken, string(a.SSHPassphrase)}
}

// remote is a parsed source URL.
type remote struct {
	// ep is the source URL without a password (and over http(s) without
	// a user name): credentials reach go-git only as an AuthMethod.
	ep *transport.Endpoint
	// display is the URL without user information, for messages.
	display string
	// key identifies the repository in the cache.
	key string
	// user and password came from the URL.
	user, password string
}

// defaultPort returns the port a supported protocol uses by default.
func defaultPort(protocol string) (int, bool) {
	switch protocol {
	case "https":
		return 443, true
	case "http":
		return 80, true
	case "ssh":
		return 22, true
	case "git":
		return 9418, true
	}
	return 0, false
}

func parseRemote(raw string) (*remote, error) {
	ep, err := transport.NewEndpoint(raw)
	if err != nil {
		// A url.Error quotes the URL, which may hold a password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	port, ok := defaultPort(ep.Protocol)
	if !ok {
		return nil, fmt.Errorf("unsupported URL scheme %q: use https, http, ssh or git", ep.Protocol)
	}
	r := &remote{user: ep.User, password: ep.Password}
	clean := *ep
	clean.Password = ""
	if isHTTP(ep.Protocol) {
		clean.User = ""
	}
	r.ep = &clean
	anon := clean
	anon.User = ""
	r.display = anon.String()
	if anon.Port == port {
		anon.Port = 0
	}
	anon.Host = strings.ToLower(anon.Host)
	anon.Path = strings.TrimRight(anon.Path, "/")
	r.key = anon.String()
	return r, nil
}

func isHTTP(protocol string) bool { return protocol == "http" || protocol == "https" }

// stripUserinfo removes what lies between "//" and "@" from a URL that
// could not be parsed, so that it can be named in a message.
func stripUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	host, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	if path == "" {
		return scheme + "://" + host
	}
	return scheme + "://" + host + "/" + path
}

// authMethod turns credentials into what go-git needs for r's protocol.
func (r *remote) authMethod(a *Auth, timeout time.Duration) (transport.AuthMethod, error) {
	switch r.ep.Protocol {
	case "https", "http":
		return r.httpAuth(a)
	case "ssh":
		return r.sshAuth(a, timeout)
	}
	return nil, nil // git:// carries no credentials
}

func (r *remote) httpAuth(a *Auth) (transport.AuthMethod, error) {
	user, password, token := r.user, r.password, ""
	if a != nil {
		token = a.BearerToken
		if a.Username != "" || a.Password != "" {
			user, password = a.Username, a.Password
		}
	}
	if token == "" && user == "" && password == "" {
		return nil, nil
	}
	if r.ep.Protocol == "http" && !isLoopback(r.ep.Host) {
		return nil, errors.New("refusing to send credentials over plain http to a host other than loopback; use https")
	}
	if token != "" {
		return &githttp.TokenAuth{Token: token}, nil
	}
	return &githttp.BasicAuth{Username: user, Password: password}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *remote) sshAuth(a *Auth, timeout time.Duration) (transport.AuthMethod, error) {
	if a == nil || len(a.KnownHosts) == 0 {
		return nil, fmt.Errorf("%w: no known_hosts given, refusing to trust the server's key blindly", ErrHostKey)
	}
	port := r.ep.Port
	if port <= 0 {
		port, _ = defaultPort("ssh")
	}
	check, algos, err := hostKeyCallback(a.KnownHosts, net.JoinHostPort(r.ep.Host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	helper := gitssh.HostKeyCallbackHelper{HostKeyCallback: check, HostKeyAlgorithms: algos}
	user := r.ep.User
	if user == "" {
		user = gitssh.DefaultUsername
	}
	var m gitssh.AuthMethod
	switch {
	case len(a.SSHIdentity) > 0:
		keys, err := gitssh.NewPublicKeys(user, a.SSHIdentity, string(a.SSHPassphrase))
		if err != nil {
			return nil, fmt.Errorf("ssh identity: %w", err)
		}
		keys.HostKeyCallbackHelper = helper
		m = keys
	case a.Password != "":
		m = &gitssh.Password{User: user, Password: a.Password, HostKeyCallbackHelper: helper}
	default:
		return nil, fmt.Errorf("%w: ssh needs an identity (a private key)", ErrAuth)
	}
	return sshWithTimeout{AuthMethod: m, timeout: timeout}, nil
}

// sshWithTimeout bounds the TCP connection to an ssh server, which go-git
// leaves unbounded.
type sshWithTimeout struct {
	gitssh.AuthMethod
	timeout time.Duration
}

func (a sshWithTimeout) ClientConfig() (*ssh.ClientConfig, error) {
	cfg, err := a.AuthMethod.ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = a.timeout
	return cfg, nil
}
