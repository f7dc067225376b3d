package git

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/net/proxy"
)

// Every step of a conversation with a git server has a deadline, so that a
// server that accepts connections and never answers costs a fetch no more
// than Options.Timeout, and leaves nothing running after it:
//
//   - http(s): the connection, the TLS handshake and the response headers
//     are bounded by the timeout, and the request (its body included) by
//     the fetch's context;
//   - ssh: the connection is dialled through deadlineDialer, which gives it
//     a deadline of the whole timeout, so the ssh handshake, the ref
//     listing and the pack are bounded as well;
//   - git://: go-git dials with the system's connect timeout, and reads and
//     writes through the fetch's context.

// transportFor returns the go-git transport of ep's protocol.
func (f *Fetcher) transportFor(ep *transport.Endpoint, caBundle []byte) (transport.Transport, error) {
	switch ep.Protocol {
	case "http", "https":
		c, err := f.httpClient(caBundle)
		if err != nil {
			return nil, err
		}
		return githttp.NewClient(c), nil
	case "ssh":
		ep.Proxy = transport.ProxyOptions{URL: deadlineScheme + "://deadline/?timeout=" + url.QueryEscape(f.opts.Timeout.String())}
	}
	return client.NewClient(ep)
}

// httpClient returns the client of requests over http(s) with the extra
// CA certificates caBundle, one per bundle, so that connections are
// reused between polls.
func (f *Fetcher) httpClient(caBundle []byte) (*http.Client, error) {
	key := sha256.Sum256(caBundle)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[key]; ok {
		return c, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: f.opts.Timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = f.opts.Timeout
	tr.ResponseHeaderTimeout = f.opts.Timeout
	if len(caBundle) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("ca.crt holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c := &http.Client{Transport: summarised{tr}}
	if len(f.clients) >= 64 { // bundles come from Secrets: keep a bounded few
		for k, old := range f.clients {
			old.CloseIdleConnections()
			delete(f.clients, k)
		}
	}
	f.clients[key] = c
	return c, nil
}

// summarised replaces the body of an error response (a status outside
// 2xx) with a fixed reason, so that whatever page a server or a proxy in
// front of it answers is neither buffered nor copied into a message (go-git
// appends the body of a 401, 403 or 404 to its error): a status is shown
// as its code and text ("500 Internal Server Error").
type summarised struct{ rt http.RoundTripper }

func (s summarised) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := s.rt.RoundTrip(req)
	if err != nil || res.StatusCode < 400 { // 2xx, or a redirect the client follows
		return res, err
	}
	// Drain a little so that the connection can be reused, then drop it.
	_, _ = io.CopyN(io.Discard, res.Body, 4<<10)
	res.Body.Close()
	res.Body = io.NopCloser(strings.NewReader("the server answered " + res.Status))
	res.ContentLength = -1
	return res, nil
}

// deadlineScheme names deadlineDialer as a proxy, the one way go-git lets
// a caller dial its ssh connections.
const deadlineScheme = "manifestsync-deadline"

func init() {
	proxy.RegisterDialerType(deadlineScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		d, err := time.ParseDuration(u.Query().Get("timeout"))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("deadline dialer: timeout %q", u.Query().Get("timeout"))
		}
		return deadlineDialer{timeout: d}, nil
	})
}

// deadlineDialer dials a TCP connection within timeout and sets the
// connection's deadline to timeout from then: no read or write on it,
// handshake included, outlives the fetch.
type deadlineDialer struct{ timeout time.Duration }

func (d deadlineDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

func (d deadlineDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: d.timeout}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Now().Add(d.timeout)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
