package httpsrc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/manifestsync/manifestsync/oci"
)

// Errors a caller may tell apart with errors.Is. They are oci's, so one
// check covers both sources.
var (
	ErrRefused = oci.ErrRefused
	ErrLimit   = oci.ErrLimit
)

// maxRedirects bounds the redirects one Fetch follows.
const maxRedirects = 5

// Limits bound what a server can make a Fetch cost.
type Limits struct {
	// MaxBodyBytes bounds the archive as downloaded.
	MaxBodyBytes int64
	// MaxFiles and MaxUnpackedBytes bound the extracted files.
	MaxFiles         int
	MaxUnpackedBytes int64
	// Timeout bounds a Fetch as a whole.
	Timeout time.Duration
}

// DefaultLimits are the limits of a zero Limits field: a 64 MiB archive,
// 10000 files and 256 MiB unpacked, 2 minutes a call.
func DefaultLimits() Limits {
	return Limits{MaxBodyBytes: 64 << 20, MaxFiles: 10000, MaxUnpackedBytes: 256 << 20, Timeout: 2 * time.Minute}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = d.MaxFiles
	}
	if l.MaxUnpackedBytes <= 0 {
		l.MaxUnpackedBytes = d.MaxUnpackedBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	return l
}

// Source is an archive to read.
type Source struct {
	// URL is https://HOST/PATH (http:// only to a loopback host, Insecure).
	// Userinfo in it is taken as basic auth credentials when Username,
	// Password and BearerToken are empty.
	URL string
	// Digest is the archive's sha256:HEX, required unless Insecure.
	Digest string
	// Insecure allows plain http to a loopback host and an empty Digest.
	Insecure bool
	// Username and Password are basic auth credentials; BearerToken, if
	// set, is sent instead. The caller reads them from a Secret.
	Username, Password string
	BearerToken        string
	// CA is PEM certificates trusted besides the system's.
	CA []byte
	// Limits' zero fields take DefaultLimits'.
	Limits Limits
}

// Validators are what a fetch left for the next poll's conditional GET.
type Validators struct {
	ETag         string
	LastModified string
	// Digest is the archive's sha256:HEX.
	Digest string
}

// Result is what a Fetch read.
type Result struct {
	// Files are the extracted files by clean relative path; nil when
	// Unchanged.
	Files map[string][]byte
	// Revision is sha256:HEX of the archive, as Digest.
	Revision string
	Digest   string
	// Validators are for the next poll.
	Validators Validators
	// Unchanged is true when the server answered 304 Not Modified to
	// the conditions of last: nothing was downloaded.
	Unchanged bool
}

// newTransport is the base transport of every Fetch; tests replace it to
// observe dials.
var newTransport = func() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// Fetch reads src's archive unless last's validators show it unchanged,
// checks its digest and extracts it. last is nil on a first fetch.
func Fetch(ctx context.Context, src Source, last *Validators) (*Result, error) {
	u, user, pass, err := parseURL(src.URL)
	shown := redact(u)
	if err != nil {
		return nil, fmt.Errorf("http source %s: %w", shown, err)
	}
	res, err := fetch(ctx, src, u, user, pass, last)
	if err != nil {
		return nil, fmt.Errorf("http source %s: %w", shown, err)
	}
	return res, nil
}

func fetch(ctx context.Context, src Source, u *url.URL, user, pass string, last *Validators) (*Result, error) {
	l := src.Limits.withDefaults()
	if err := allowed(u, src.Insecure); err != nil {
		return nil, err
	}
	if src.Digest == "" && !src.Insecure {
		return nil, fmt.Errorf("%w: a sha256 digest is required unless insecure", ErrRefused)
	}
	if src.Digest != "" && !validDigest(src.Digest) {
		return nil, fmt.Errorf("%w: digest %q is not sha256:HEX", ErrRefused, src.Digest)
	}
	if src.Username == "" && src.Password == "" && src.BearerToken == "" {
		src.Username, src.Password = user, pass
	}
	base := newTransport()
	if len(src.CA) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(src.CA) {
			return nil, fmt.Errorf("%w: the CA holds no PEM certificate", ErrRefused)
		}
		base.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	defer base.CloseIdleConnections()
	client := &http.Client{
		Transport: &authTransport{base: base, origin: u, src: src},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrRefused, maxRedirects)
			}
			if err := allowed(req.URL, src.Insecure); err != nil {
				return fmt.Errorf("redirect to %s: %w", redact(req.URL), err)
			}
			return nil
		},
	}
	ctx, cancel := context.WithTimeout(ctx, l.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("request: %w", unwrapURLError(err))
	}
	// Conditions only when the bytes they stand for are still the ones
	// asked for: a new pin is checked against a download.
	if last != nil && last.Digest != "" && (src.Digest == "" || src.Digest == last.Digest) {
		if last.ETag != "" {
			req.Header.Set("If-None-Match", last.ETag)
		}
		if last.LastModified != "" {
			req.Header.Set("If-Modified-Since", last.LastModified)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		if req.Header.Get("If-None-Match") == "" && req.Header.Get("If-Modified-Since") == "" {
			return nil, fmt.Errorf("%w: the server answered 304 Not Modified to an unconditional GET", ErrRefused)
		}
		v := *last
		if et := resp.Header.Get("ETag"); et != "" {
			v.ETag = et
		}
		if lm := resp.Header.Get("Last-Modified"); lm != "" {
			v.LastModified = lm
		}
		return &Result{Revision: last.Digest, Digest: last.Digest, Validators: v, Unchanged: true}, nil
	case resp.StatusCode != http.StatusOK:
		// The server's text is never read: it may echo what it was sent.
		return nil, fmt.Errorf("GET: the server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	if resp.ContentLength > l.MaxBodyBytes {
		return nil, fmt.Errorf("%w: the archive declares %d bytes, more than the limit of %d: not downloaded", ErrLimit, resp.ContentLength, l.MaxBodyBytes)
	}
	h := sha256.New()
	body, err := io.ReadAll(io.TeeReader(io.LimitReader(resp.Body, l.MaxBodyBytes+1), h))
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %w", unwrapURLError(err))
	}
	if int64(len(body)) > l.MaxBodyBytes {
		return nil, fmt.Errorf("%w: the archive is larger than the limit of %d bytes", ErrLimit, l.MaxBodyBytes)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if src.Digest != "" && got != src.Digest {
		return nil, fmt.Errorf("%w: digest mismatch: want %s, the bytes downloaded have %s", ErrRefused, src.Digest, got)
	}
	files, err := Extract(body, l)
	if err != nil {
		return nil, err
	}
	return &Result{
		Files:      files,
		Revision:   got,
		Digest:     got,
		Validators: Validators{ETag: resp.Header.Get("ETag"), LastModified: resp.Header.Get("Last-Modified"), Digest: got},
	}, nil
}

// Extract unpacks a tar+gzip or a zip archive, told apart by their magic
// bytes, within l's file count and unpacked size.
func Extract(archive []byte, l Limits) (map[string][]byte, error) {
	l = l.withDefaults()
	switch {
	case bytes.HasPrefix(archive, []byte{0x1f, 0x8b}):
		return oci.Unpack(archive, oci.Limits{MaxFiles: l.MaxFiles, MaxUnpackedBytes: l.MaxUnpackedBytes})
	case bytes.HasPrefix(archive, []byte("PK\x03\x04")), bytes.HasPrefix(archive, []byte("PK\x05\x06")):
		return Unzip(archive, l)
	}
	return nil, fmt.Errorf("%w: not a tar+gzip or zip archive", ErrRefused)
}

// authTransport adds the credentials to a request only when it goes to the
// origin's own scheme and host:port: never over a redirect to another
// host, another port or plain http.
type authTransport struct {
	base   http.RoundTripper
	origin *url.URL
	src    Source
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Whatever net/http copied over a redirect is dropped first.
	if req.Header.Get("Authorization") != "" || req.URL.User != nil {
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
		req.URL.User = nil
	}
	same := strings.EqualFold(req.URL.Scheme, t.origin.Scheme) && strings.EqualFold(req.URL.Host, t.origin.Host)
	secure := req.URL.Scheme == "https" || isLoopback(req.URL.Host)
	if same && secure {
		switch {
		case t.src.BearerToken != "":
			req = req.Clone(req.Context())
			req.Header.Set("Authorization", "Bearer "+t.src.BearerToken)
		case t.src.Username != "" || t.src.Password != "":
			req = req.Clone(req.Context())
			req.SetBasicAuth(t.src.Username, t.src.Password)
		}
	}
	return t.base.RoundTrip(req)
}

// parseURL parses raw and takes its userinfo out.
func parseURL(raw string) (u *url.URL, user, pass string, err error) {
	u, err = url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the whole URL: it is not returned.
		return &url.URL{}, "", "", fmt.Errorf("%w: not a valid URL", ErrRefused)
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	if u.Host == "" {
		return u, "", "", fmt.Errorf("%w: a URL without a host", ErrRefused)
	}
	return u, user, pass, nil
}

// allowed refuses a URL that is not https, but plain http to a loopback
// host when insecure.
func allowed(u *url.URL, insecure bool) error {
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if !isLoopback(u.Host) {
			return fmt.Errorf("%w: plain http to %s, not a loopback host: use https", ErrRefused, u.Hostname())
		}
		if !insecure {
			return fmt.Errorf("%w: plain http without insecure", ErrRefused)
		}
		return nil
	}
	return fmt.Errorf("%w: scheme %q, not https", ErrRefused, u.Scheme)
}

// redact is u as errors show it: no userinfo, query or fragment.
func redact(u *url.URL) string {
	if u == nil || u.Host == "" && u.Path == "" {
		return "(no valid URL)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// unwrapURLError drops net/http's *url.Error, whose text carries the
// request's URL with its query string.
func unwrapURLError(err error) error {
	var ue *url.Error
	for errors.As(err, &ue) {
		err = ue.Err
	}
	return err
}

// isLoopback reports whether host (host or host:port) is a loopback
// address or localhost.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}
