package charts

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
	"syscall"
	"time"

	"github.com/manifestsync/manifestsync/oci"
)

// Reasons a fetch fails; test for them with errors.Is.
var (
	// The same as oci's: a chart from a registry fails as an artifact does.
	ErrUnauthorized = oci.ErrUnauthorized
	ErrNotFound     = oci.ErrNotFound
	ErrUnreachable  = errors.New("host unreachable")
	ErrLimit        = oci.ErrLimit
	ErrTimeout      = errors.New("timed out")
)

// newClient returns the client of every request: the connection, the TLS
// handshake and the response headers are bounded by timeout, and the body
// by the fetch's context (whose deadline is the fetch's Timeout), so that a
// server that accepts connections and never answers costs no more than
// that and leaves nothing running.
func newClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = timeout
	tr.ResponseHeaderTimeout = timeout
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("more than 5 redirects")
			}
			return nil
		},
	}
}

// clientFor returns the client of requests made with a: the Fetcher's, or
// with a's extra CA certificates one per bundle (bounded: bundles come
// from Secrets), so that connections are reused between polls.
func (f *Fetcher) clientFor(a *Auth) (*http.Client, error) {
	if a == nil || len(a.CABundle) == 0 {
		return f.client, nil
	}
	key := sha256.Sum256(a.CABundle)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[key]; ok {
		return c, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(a.CABundle) {
		return nil, errors.New("ca.crt holds no PEM certificate")
	}
	tr := f.client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c := &http.Client{Transport: tr, CheckRedirect: f.client.CheckRedirect}
	if f.clients == nil || len(f.clients) >= 64 {
		for _, old := range f.clients {
			old.CloseIdleConnections()
		}
		f.clients = map[[32]byte]*http.Client{}
	}
	f.clients[key] = c
	return c, nil
}

// statusError words an answer that is not a success by its status alone
// (the body, which may be anything a server or a proxy says, is dropped):
// 401 and 403 are ErrUnauthorized, 404 ErrNotFound.
func statusError(res *http.Response) error {
	_, _ = io.CopyN(io.Discard, res.Body, 4<<10) // let the connection be reused
	switch res.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: the server answered %s", ErrUnauthorized, res.Status)
	case http.StatusNotFound:
		return fmt.Errorf("%w: the server answered %s", ErrNotFound, res.Status)
	}
	return fmt.Errorf("the server answered %s", res.Status)
}

// readBody reads a body of at most limit bytes; what is longer is
// ErrLimit, read no further than limit+1 bytes.
func readBody(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, classify(err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s larger than %d bytes", ErrLimit, what, limit)
	}
	return b, nil
}

// classify prefixes a transport error with the reason it stands for.
func classify(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return err
}
