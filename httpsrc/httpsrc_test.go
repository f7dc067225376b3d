package httpsrc

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/oci"
)

// digestOf is the sha256:HEX of b.
func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// tarEntry is one entry of a test tar+gzip.
type tarEntry struct {
	hd   tar.Header
	data string
}

func tgzOf(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hd := e.hd
		if hd.Typeflag == tar.TypeReg {
			hd.Size = int64(len(e.data))
		}
		if hd.Mode == 0 {
			hd.Mode = 0o644
		}
		if err := tw.WriteHeader(&hd); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipEntry is one entry of a test zip: a mode with a type bit (symlink,
// device) is written in the unix external attributes.
type zipEntry struct {
	name string
	mode fs.FileMode
	data string
}

func zipOf(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		fh := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		fh.SetMode(mode)
		w, err := zw.CreateHeader(fh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reg(name, data string) tarEntry {
	return tarEntry{hd: tar.Header{Typeflag: tar.TypeReg, Name: name}, data: data}
}

// archiveServer serves one archive with ETag or Last-Modified validators
// through http.ServeContent (which answers the conditions), and counts the
// bodies it sends.
type archiveServer struct {
	*httptest.Server
	mu       sync.Mutex
	body     []byte
	etag     string
	modTime  time.Time
	useETag  bool
	requests atomic.Int64
	bodies   atomic.Int64
	auth     atomic.Value // the last Authorization header seen
}

func newArchiveServer(t *testing.T, body []byte, useETag bool) *archiveServer {
	s := &archiveServer{useETag: useETag}
	s.set(body, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.auth.Store(r.Header.Get("Authorization"))
		s.mu.Lock()
		body, etag, mod := s.body, s.etag, s.modTime
		s.mu.Unlock()
		if s.useETag {
			w.Header().Set("ETag", etag)
			mod = time.Time{}
		}
		cw := &countingWriter{ResponseWriter: w}
		http.ServeContent(cw, r, "", mod, bytes.NewReader(body))
		if cw.n > 0 {
			s.bodies.Add(1)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *archiveServer) set(body []byte, mod time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.etag, s.modTime = body, `"`+digestOf(body)[7:23]+`"`, mod
}

type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n += len(b)
	return c.ResponseWriter.Write(b)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestUnchangedPollsDownloadNothing: a server whose archive did not change
// answers 100 polls 304 from the ETag, or from Last-Modified; it is sent
// one body in all, the first.
func TestUnchangedPollsDownloadNothing(t *testing.T) {
	body := tgzOf(t, reg("a.yaml", "kind: A\n"))
	for _, useETag := range []bool{true, false} {
		t.Run(fmt.Sprintf("etag=%v", useETag), func(t *testing.T) {
			s := newArchiveServer(t, body, useETag)
			src := Source{URL: s.URL + "/config.tgz", Digest: digestOf(body), Insecure: true}
			res, err := Fetch(ctxT(t), src, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Files["a.yaml"]) != "kind: A\n" || res.Unchanged || res.Revision != digestOf(body) {
				t.Fatalf("first fetch: %+v", res)
			}
			if useETag && res.Validators.ETag == "" || !useETag && res.Validators.LastModified == "" {
				t.Fatalf("no validator kept: %+v", res.Validators)
			}
			v := res.Validators
			for i := range 100 {
				res, err := Fetch(ctxT(t), src, &v)
				if err != nil {
					t.Fatalf("poll %d: %v", i, err)
				}
				if !res.Unchanged || res.Files != nil || res.Revision != digestOf(body) {
					t.Fatalf("poll %d: %+v", i, res)
				}
				v = res.Validators
			}
			if got := s.requests.Load(); got != 101 {
				t.Errorf("server saw %d requests, want 101", got)
			}
			if got := s.bodies.Load(); got != 1 {
				t.Errorf("server sent %d bodies, want 1 (the first fetch's)", got)
			}
		})
	}
}

// TestChangedArchiveIsFetched: a server whose archive changed (a new ETag,
// a later Last-Modified) is read again; a new pinned digest is downloaded
// even if the server would answer the old validators 304.
func TestChangedArchiveIsFetched(t *testing.T) {
	v1 := zipOf(t, zipEntry{name: "a.yaml", data: "v: 1\n"})
	v2 := zipOf(t, zipEntry{name: "a.yaml", data: "v: 2\n"}, zipEntry{name: "dir/b.yaml", data: "b\n"})
	for _, useETag := range []bool{true, false} {
		t.Run(fmt.Sprintf("etag=%v", useETag), func(t *testing.T) {
			s := newArchiveServer(t, v1, useETag)
			src := Source{URL: s.URL + "/config.zip", Insecure: true}
			res, err := Fetch(ctxT(t), src, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.set(v2, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
			res2, err := Fetch(ctxT(t), src, &res.Validators)
			if err != nil {
				t.Fatal(err)
			}
			if res2.Unchanged || string(res2.Files["a.yaml"]) != "v: 2\n" || string(res2.Files["dir/b.yaml"]) != "b\n" || res2.Revision != digestOf(v2) {
				t.Fatalf("changed archive: %+v", res2)
			}
		})
	}
	// The server keeps answering 304 to the old validators (it lies), but
	// the pin moved: no condition is sent, the new bytes are checked.
	s := newArchiveServer(t, v1, true)
	old, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.zip", Digest: digestOf(v1), Insecure: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.body = v2 // same ETag
	s.mu.Unlock()
	res, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.zip", Digest: digestOf(v2), Insecure: true}, &old.Validators)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unchanged || res.Digest != digestOf(v2) {
		t.Fatalf("a new pin was not downloaded: %+v", res)
	}
}

// TestDigestMismatchRefused: a server serving other bytes than the pinned
// ones gets an error naming the URL and both digests, and nothing of its
// archive is extracted (a hostile archive in it is not even looked at).
func TestDigestMismatchRefused(t *testing.T) {
	pinned := tgzOf(t, reg("a.yaml", "good\n"))
	served := tgzOf(t, reg("../evil", "bad\n"))
	s := newArchiveServer(t, served, true)
	res, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Digest: digestOf(pinned), Insecure: true}, nil)
	if err == nil || res != nil {
		t.Fatalf("mismatch accepted: %v, %+v", err, res)
	}
	msg := err.Error()
	for _, want := range []string{s.URL + "/c.tgz", digestOf(pinned), digestOf(served)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if !errors.Is(err, ErrRefused) || strings.Contains(msg, "evil") {
		t.Errorf("error %q: want a digest refusal, before extraction", msg)
	}
	// A digest is required unless insecure, and must be sha256:HEX.
	if _, err := Fetch(ctxT(t), Source{URL: "https://example.com/c.tgz"}, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("no digest: %v", err)
	}
	if _, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Digest: "md5:00", Insecure: true}, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("bad digest: %v", err)
	}
}

// TestHostileArchivesRefused: a server serving a tar+gzip or zip whose
// entry escapes the directory, is absolute, is a symbolic link or a device
// gets an error naming the entry, and no files.
func TestHostileArchivesRefused(t *testing.T) {
	cases := map[string]struct {
		archive []byte
		entry   string
	}{
		"tgz dotdot":   {tgzOf(t, reg("ok.yaml", "x"), reg("a/../../evil", "x")), "a/../../evil"},
		"tgz absolute": {tgzOf(t, reg("/etc/evil", "x")), "/etc/evil"},
		"tgz symlink":  {tgzOf(t, tarEntry{hd: tar.Header{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "/etc/passwd"}}), "link"},
		"tgz device":   {tgzOf(t, tarEntry{hd: tar.Header{Typeflag: tar.TypeChar, Name: "dev"}}), "dev"},
		"zip dotdot":   {zipOf(t, zipEntry{name: "ok.yaml", data: "x"}, zipEntry{name: "../evil", data: "x"}), "../evil"},
		"zip absolute": {zipOf(t, zipEntry{name: "/etc/evil", data: "x"}), "/etc/evil"},
		"zip windows":  {zipOf(t, zipEntry{name: `..\evil`, data: "x"}), `..\evil`},
		"zip symlink":  {zipOf(t, zipEntry{name: "link", mode: fs.ModeSymlink | 0o777, data: "/etc/passwd"}), "link"},
		"zip device":   {zipOf(t, zipEntry{name: "dev", mode: fs.ModeDevice | fs.ModeCharDevice | 0o600}), "dev"},
		"zip fifo":     {zipOf(t, zipEntry{name: "fifo", mode: fs.ModeNamedPipe | 0o600}), "fifo"},
		"zip twice":    {zipOf(t, zipEntry{name: "a", data: "1"}, zipEntry{name: "./a", data: "2"}), "./a"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := newArchiveServer(t, c.archive, true)
			if _, err := Fetch(ctxT(t), Source{URL: s.URL + "/x", Digest: digestOf(c.archive)}, nil); !errors.Is(err, ErrRefused) {
				t.Fatalf("plain http without insecure: %v", err)
			}
			res, err := Fetch(ctxT(t), Source{URL: s.URL + "/x", Digest: digestOf(c.archive), Insecure: true}, nil)
			if err == nil || res != nil {
				t.Fatalf("accepted: %+v", res)
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.entry)) {
				t.Errorf("error %q: want a refusal naming %q", err, c.entry)
			}
		})
	}
}

// TestZipBombsBounded: a zip whose entries unpack over the limit, whose
// declared sizes lie (small) about the bytes it deflates to, or that has
// too many files, gets ErrLimit and no files.
func TestZipBombsBounded(t *testing.T) {
	l := Limits{MaxFiles: 3, MaxUnpackedBytes: 1 << 20}
	big := strings.Repeat("0", 2<<20)
	if _, err := Unzip(zipOf(t, zipEntry{name: "big", data: big}), l); !errors.Is(err, ErrLimit) {
		t.Errorf("declared over the limit: %v", err)
	}
	if _, err := Unzip(zipOf(t, zipEntry{name: "a"}, zipEntry{name: "b"}, zipEntry{name: "c"}, zipEntry{name: "d"}), l); !errors.Is(err, ErrLimit) {
		t.Errorf("too many files: %v", err)
	}
	// A lying declared size: the central directory says 10 bytes for an
	// entry that inflates to 2 MiB.
	z := zipOf(t, zipEntry{name: "liar", data: big})
	r, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	var patched []byte
	patched = append(patched, z...)
	setSize := func(off int64) { // uncompressed size field at off
		patched[off], patched[off+1], patched[off+2], patched[off+3] = 10, 0, 0, 0
	}
	// Local header: uncompressed size at +22; central directory: at +24.
	off, err := r.File[0].DataOffset()
	if err != nil {
		t.Fatal(err)
	}
	local := off - 30 - int64(len("liar"))
	setSize(local + 22)
	cd := int64(bytes.LastIndex(patched, []byte("PK\x01\x02")))
	setSize(cd + 24)
	if pr, err := zip.NewReader(bytes.NewReader(patched), int64(len(patched))); err != nil || pr.File[0].UncompressedSize64 != 10 {
		t.Fatalf("the patched zip does not declare 10 bytes: %v", err)
	}
	files, err := Unzip(patched, l)
	if err == nil || files != nil {
		t.Fatalf("a lying size was read whole: %d files", len(files))
	}
	if !errors.Is(err, ErrLimit) && !errors.Is(err, zip.ErrFormat) {
		t.Errorf("lying size: %v", err)
	}
	// A well-formed zip within the limits reads.
	files, err = Unzip(zipOf(t, zipEntry{name: "d/", mode: fs.ModeDir | 0o755}, zipEntry{name: "d/a.yaml", data: "a"}), l)
	if err != nil || len(files) != 1 || string(files["d/a.yaml"]) != "a" {
		t.Errorf("good zip: %v %v", files, err)
	}
}

// TestBodyOverLimit: a server declaring a body over the limit is refused
// before a byte of it is read; one that declares no length and streams
// without end (it lies by omission) is cut at the limit.
func TestBodyOverLimit(t *testing.T) {
	l := Limits{MaxBodyBytes: 1 << 20}
	t.Run("declared", func(t *testing.T) {
		body := bytes.Repeat([]byte{0x1f}, 2<<20)
		s := newArchiveServer(t, body, true)
		_, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Digest: digestOf(body), Insecure: true, Limits: l}, nil)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "not downloaded") {
			t.Fatalf("declared over the limit: %v", err)
		}
	})
	t.Run("endless", func(t *testing.T) {
		var sent atomic.Int64
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte{0x1f}, 64<<10)
			for sent.Load() < 64<<20 { // stops when the client hangs up, or at 64 MiB
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}))
		defer s.Close()
		_, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Insecure: true, Limits: l}, nil)
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("endless body: %v", err)
		}
		if got := sent.Load(); got >= 64<<20 {
			t.Errorf("the client read on to %d bytes", got)
		}
	})
	t.Run("understated", func(t *testing.T) {
		// Content-Length says 100 bytes, 2 MiB follow on the raw
		// connection: the client reads what was declared and no more.
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, bw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n")
			_, _ = bw.Write(bytes.Repeat([]byte{0x1f}, 2<<20))
			_ = bw.Flush()
		}))
		defer s.Close()
		_, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Digest: digestOf(nil), Insecure: true, Limits: l}, nil)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "digest mismatch") {
			t.Fatalf("understated length: %v", err)
		}
		want := digestOf(bytes.Repeat([]byte{0x1f}, 100))
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want the digest of the 100 declared bytes %s", err, want)
		}
	})
	t.Run("slow", func(t *testing.T) {
		// A server that never answers is bounded by the timeout.
		release := make(chan struct{})
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer s.Close()
		defer close(release)
		start := time.Now()
		_, err := Fetch(ctxT(t), Source{URL: s.URL + "/c.tgz", Insecure: true, Limits: Limits{Timeout: 300 * time.Millisecond}}, nil)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
			t.Fatalf("slow server: %v after %v", err, time.Since(start))
		}
	})
}

// TestRedirectDropsCredentials: a server that redirects to another host
// (here another port, and the name localhost) gets no credentials at the
// second server, basic or bearer, though net/http would copy them to a
// subdomain or another port; the first server gets them.
func TestRedirectDropsCredentials(t *testing.T) {
	body := tgzOf(t, reg("a.yaml", "a"))
	second := newArchiveServer(t, body, true)
	_, port, _ := net.SplitHostPort(second.Listener.Addr().String())
	for _, target := range []string{second.URL, "http://localhost:" + port} {
		for _, src := range []Source{
			{Username: "user", Password: "s3cret"},
			{BearerToken: "t0ken"},
		} {
			var firstAuth atomic.Value
			first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				firstAuth.Store(r.Header.Get("Authorization"))
				http.Redirect(w, r, target+"/c.tgz", http.StatusFound)
			}))
			second.auth.Store("")
			src.URL, src.Digest, src.Insecure = first.URL+"/c.tgz", digestOf(body), true
			res, err := Fetch(ctxT(t), src, nil)
			first.Close()
			if err != nil || string(res.Files["a.yaml"]) != "a" {
				t.Fatalf("redirect to %s: %v", target, err)
			}
			if got := second.auth.Load().(string); got != "" {
				t.Errorf("the second host (%s) got Authorization %q", target, got)
			}
			if got, _ := firstAuth.Load().(string); got == "" {
				t.Errorf("the first host got no credentials")
			}
		}
	}
	// A redirect loop is cut after 5 hops.
	var hops atomic.Int64
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	defer loop.Close()
	_, err := Fetch(ctxT(t), Source{URL: loop.URL + "/c.tgz", Insecure: true}, nil)
	if !errors.Is(err, ErrRefused) || hops.Load() > 6 {
		t.Errorf("redirect loop: %v after %d hops", err, hops.Load())
	}
	// A redirect to plain http on a non-loopback host is refused.
	away := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://example.invalid/c.tgz", http.StatusFound)
	}))
	defer away.Close()
	if _, err := Fetch(ctxT(t), Source{URL: away.URL + "/c.tgz", Insecure: true}, nil); !errors.Is(err, ErrRefused) {
		t.Errorf("redirect to plain http elsewhere: %v", err)
	}
}

// TestPlainHTTPElsewhereRefused: plain http to a host other than loopback
// is refused before any connection is dialled, insecure or not: such a
// server gets nothing, credentials least of all.
func TestPlainHTTPElsewhereRefused(t *testing.T) {
	var dials atomic.Int64
	orig := newTransport
	newTransport = func() *http.Transport {
		tr := orig()
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return nil, errors.New("dial refused by the test")
		}
		return tr
	}
	defer func() { newTransport = orig }()
	for _, u := range []string{"http://example.com/c.tgz", "http://10.0.0.1:8080/c.tgz", "ftp://127.0.0.1/c.tgz", "file:///etc/passwd"} {
		_, err := Fetch(ctxT(t), Source{URL: u, Insecure: true, Username: "u", Password: "p"}, nil)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s: %v", u, err)
		}
	}
	if got := dials.Load(); got != 0 {
		t.Errorf("%d connections dialled", got)
	}
}

// TestURLSecretsNotInErrors: a server answering 403 with the request's
// token echoed in its body, an unreachable one, and one serving the wrong
// bytes never see the URL's userinfo or query string in an error, nor
// their own body: the error names the URL without them and the status.
func TestURLSecretsNotInErrors(t *testing.T) {
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "BODYSECRET you sent "+r.URL.RawQuery, http.StatusForbidden)
	}))
	defer forbidden.Close()
	body := tgzOf(t, reg("a", "a"))
	wrong := newArchiveServer(t, body, true)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, base := range []string{forbidden.URL, wrong.URL, closed.URL} {
		u := strings.Replace(base, "http://", "http://alice:PASSSECRET@", 1) + "/c.tgz?token=QUERYSECRET#FRAGSECRET"
		_, err := Fetch(ctxT(t), Source{URL: u, Digest: digestOf([]byte("other")), Insecure: true}, nil)
		if err == nil {
			t.Fatalf("%s: no error", base)
		}
		msg := err.Error()
		for _, secret := range []string{"PASSSECRET", "alice", "QUERYSECRET", "FRAGSECRET", "BODYSECRET", "token"} {
			if strings.Contains(msg, secret) {
				t.Errorf("error %q shows %s", msg, secret)
			}
		}
		if !strings.Contains(msg, base+"/c.tgz") {
			t.Errorf("error %q does not name the URL", msg)
		}
		if base == forbidden.URL && !strings.Contains(msg, "403") {
			t.Errorf("error %q does not give the status", msg)
		}
	}
	// An unparsable URL with a secret in it is not quoted either.
	if _, err := Fetch(ctxT(t), Source{URL: "https://h/%zz?token=QUERYSECRET"}, nil); err == nil || strings.Contains(err.Error(), "QUERYSECRET") {
		t.Errorf("bad URL: %v", err)
	}
	// The userinfo is sent as basic auth to the URL's own host.
	s := newArchiveServer(t, body, true)
	if _, err := Fetch(ctxT(t), Source{URL: strings.Replace(s.URL, "http://", "http://alice:pw@", 1) + "/c", Digest: digestOf(body), Insecure: true}, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.auth.Load().(string); got == "" {
		t.Error("the URL's userinfo was not sent as basic auth")
	}
}

// TestHTTPSWithCA: a server with a certificate of a private CA is read
// when the CA is given, and refused when not.
func TestHTTPSWithCA(t *testing.T) {
	body := tgzOf(t, reg("a.yaml", "a"))
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write(body)
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	defer s.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	src := Source{URL: s.URL + "/c.tgz", Digest: digestOf(body), BearerToken: "tok"}
	if _, err := Fetch(ctxT(t), src, nil); err == nil {
		t.Fatal("an unknown CA was trusted")
	}
	src.CA = ca
	res, err := Fetch(ctxT(t), src, nil)
	if err != nil || string(res.Files["a.yaml"]) != "a" {
		t.Fatalf("with the CA: %v", err)
	}
	src.BearerToken = ""
	if _, err := Fetch(ctxT(t), src, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("without credentials: %v", err)
	}
}

// TestExtractSameRulesAsOCI: a tar+gzip goes through oci.Unpack, so its
// errors are oci's and a good one reads the same files.
func TestExtractSameRulesAsOCI(t *testing.T) {
	good, err := oci.Pack(map[string][]byte{"a.yaml": []byte("a"), "d/b.yaml": []byte("b")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Extract(good, Limits{})
	if err != nil || len(files) != 2 || string(files["d/b.yaml"]) != "b" {
		t.Fatalf("good tgz: %v %v", files, err)
	}
	if _, err := Extract([]byte("plain text"), Limits{}); !errors.Is(err, ErrRefused) {
		t.Errorf("not an archive: %v", err)
	}
	if _, err := Extract(tgzOf(t, reg("a", "1"), reg("b", "2")), Limits{MaxFiles: 1}); !errors.Is(err, oci.ErrLimit) {
		t.Errorf("too many files: %v", err)
	}
}

// FuzzUnzip: whatever bytes a server sends as a zip, Unzip returns files
// with clean relative names within the limits, or an error; it never
// panics.
func FuzzUnzip(f *testing.F) {
	f.Add(zipOf(f, zipEntry{name: "a.yaml", data: "a"}, zipEntry{name: "d/", mode: fs.ModeDir | 0o755}))
	f.Add(zipOf(f, zipEntry{name: "../x", data: "a"}))
	f.Add(zipOf(f, zipEntry{name: "l", mode: fs.ModeSymlink | 0o777, data: "/"}))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	l := Limits{MaxFiles: 8, MaxUnpackedBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := Unzip(b, l)
		if err != nil {
			return
		}
		if len(files) > l.MaxFiles {
			t.Fatalf("%d files", len(files))
		}
		var total int64
		for name, data := range files {
			p, err := entryPath(name)
			if err != nil || p != name || p == "" || strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") {
				t.Fatalf("name %q", name)
			}
			total += int64(len(data))
		}
		if total > l.MaxUnpackedBytes {
			t.Fatalf("%d bytes unpacked", total)
		}
	})
}
