package git

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// gitHeapBudget is how much the heap may grow while four 500 MB blobs are
// refused at once: what go-git and the check buffer (measured: 4-5 MiB),
// with a wide margin; without the check each blob costs its 500 MB (four
// blobs of 100 MB grew it by over 1 GiB).
const gitHeapBudget = 32 << 20

// TestBigBlob fetches a repository whose file is a 500 MB blob, four
// times at once: each fetch fails with a size error, having stored none
// of it, and the heap grows by far less than one blob. Not in parallel:
// the heap is the process's.
func TestBigBlob(t *testing.T) {
	url, sent := gittest.BigBlobServer(t)
	f := New(Options{Timeout: time.Minute})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := gittest.HeapPeak()
	errs := make(chan error, 4)
	for i := range cap(errs) {
		go func() {
			// Four repositories: four fetches at once, not one joined by four.
			_, err := f.Fetch(context.Background(), "app", v1alpha1.GitSource{URL: fmt.Sprintf("%s/big%d.git", url, i)}, nil)
			errs <- err
		}()
	}
	for range cap(errs) {
		err := <-errs
		// Over a fetch's worth of bytes, the blob is not even hashed
		// to name it.
		want := fmt.Sprintf("limit exceeded: the server sent a file (blob) of %d bytes, over the limit of %d bytes a file", gittest.BigBlobSize, defaultMaxFileBytes)
		if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	peak := stop()
	growth := int64(peak) - int64(before.HeapAlloc)
	t.Logf("heap before %d MiB, peak %d MiB (growth %d MiB, budget %d MiB); the server sent %d kB of packs; the process's %s",
		before.HeapAlloc>>20, peak>>20, growth>>20, gitHeapBudget>>20, sent.Load()>>10, vmHWM())
	if growth > gitHeapBudget {
		t.Errorf("the heap grew by %d MiB refusing four 500 MB blobs, over the budget of %d MiB", growth>>20, gitHeapBudget>>20)
	}
	if bytes, repos := f.CacheBytes(); bytes > 1<<20 {
		t.Errorf("the cache holds %d bytes in %d repositories after refused fetches", bytes, repos)
	}
}

// TestFileLimit names the file over the limit: read from the server
// (stopped at the object's header, named from the trees of the pack, which
// git sends before their entries), and read from a cache that holds it
// (here, kept from before the limit was lowered).
func TestFileLimit(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	repo := newTestRepo(t, s.root, "big")
	repo.write(map[string]string{"deploy/app.yaml": "v: 1\n", "deploy/big.yaml": strings.Repeat("x", 2000)})
	repo.commit("b1", "first")
	repo.push()
	src := v1alpha1.GitSource{URL: s.url("big")}

	err := fetchErr(t, New(Options{Timeout: testTimeout, MaxFileBytes: 1024}), src, nil)
	if want := "limit exceeded: file deploy/big.yaml is 2000 bytes, over the limit of 1024 bytes a file (the server sent it)"; !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}

	// On disk too, and a cut pack leaves the cache usable.
	dir := t.TempDir()
	err = fetchErr(t, New(Options{Timeout: testTimeout, MaxFileBytes: 1024, CacheDir: dir}), src, nil)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "file deploy/big.yaml is 2000 bytes") {
		t.Errorf("with a cache on disk: %v", err)
	}
	if snap := mustFetch(t, New(Options{Timeout: testTimeout, CacheDir: dir}), src, nil); len(snap.Files["deploy/big.yaml"]) != 2000 {
		t.Errorf("after a cut pack, the cache on disk gave deploy/big.yaml of %d bytes", len(snap.Files["deploy/big.yaml"]))
	}

	f := New(Options{Timeout: testTimeout})
	mustFetch(t, f, src, nil)
	f.opts.MaxFileBytes = 1024
	src.Path = "deploy" // not in the snapshot cache: the tree is read
	err = fetchErr(t, f, src, nil)
	if want := "limit exceeded: file big.yaml is 2000 bytes, over the limit of 1024 bytes a file"; !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want %q", err, want)
	}
}

// TestPending: with Options.Wait, a server that does not answer holds the
// caller for Wait, not for the timeout; the fetch ends in the background
// at its timeout and the next Fetch gets its error. A source fetched
// before is served its last snapshot meanwhile.
func TestPending(t *testing.T) {
	t.Parallel()
	port := gittest.Blackhole(t)
	f := New(Options{Timeout: 2 * time.Second, Wait: 50 * time.Millisecond})
	src := v1alpha1.GitSource{URL: fmt.Sprintf("http://127.0.0.1:%d/repo.git", port)}
	start := time.Now()
	_, err := f.Fetch(context.Background(), "app", src, nil)
	var pe *PendingError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPending) {
		t.Fatalf("error %v, want a pending fetch", err)
	}
	// Without Wait, the caller is held for the whole timeout.
	if d := time.Since(start); d >= 2*time.Second {
		t.Errorf("Fetch took %v, the whole timeout", d)
	}
	if !strings.Contains(err.Error(), "fetch in progress: not done within 50ms; retried when it ends") {
		t.Errorf("error %q", err)
	}
	select {
	case <-pe.Done:
	case <-time.After(time.Minute):
		t.Fatal("the fetch did not end at its timeout")
	}
	_, err = f.Fetch(context.Background(), "app", src, nil)
	// The response's deadline or the fetch's, whichever comes first.
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("after the fetch ended: %v, want a timeout", err)
	}

	// A server that answered before and hangs now: the last snapshot.
	s := httpTransport(t)
	repo := seededRepo(t, s.root, "seeded")
	var hang atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			<-r.Context().Done()
			return
		}
		http.Redirect(w, r, strings.TrimSuffix(s.url("seeded"), "/seeded.git")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)
	f = New(Options{Timeout: 2 * time.Second, Wait: 10 * time.Second})
	good := v1alpha1.GitSource{URL: front.URL + "/seeded.git"}
	mustFetch(t, f, good, nil)
	hang.Store(true)
	f.opts.Wait, f.flights.Wait = 50*time.Millisecond, 50*time.Millisecond
	snap := mustFetch(t, f, good, nil)
	if snap.Revision != "HEAD@sha1:"+repo.hashes["c4"] || snap.Pending == nil {
		t.Errorf("revision %s, pending %v: want the last one, pending", snap.Revision, snap.Pending)
	} else {
		select {
		case <-snap.Pending:
		case <-time.After(time.Minute):
			t.Error("Pending was not closed when the fetch ended")
		}
	}
	// Other credentials are not served what these fetched.
	_, err = f.Fetch(context.Background(), "app", good, &Auth{BearerToken: "other-token"})
	if !errors.Is(err, ErrPending) {
		t.Errorf("other credentials: %v, want a pending fetch", err)
	}
}

// TestErrorBody: the page a server answers with an error status is not
// copied into the error, only its status.
func TestErrorBody(t *testing.T) {
	t.Parallel()
	const page = "<html>internal-only stack trace: db password hunter2</html>"
	for _, code := range []int{http.StatusInternalServerError, http.StatusForbidden, http.StatusNotFound, http.StatusUnauthorized} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, page, code)
			}))
			t.Cleanup(srv.Close)
			err := fetchErr(t, New(Options{Timeout: testTimeout}), v1alpha1.GitSource{URL: srv.URL + "/repo.git"}, nil)
			if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "html") {
				t.Errorf("error %q copies the server's page", err)
			}
			if code == http.StatusInternalServerError && !strings.Contains(err.Error(), "500") {
				t.Errorf("error %q does not give the status", err)
			}
		})
	}
}

// TestCacheBounds: the cache is bounded by bytes, least recently fetched
// dropped first, and Keep drops what no caller uses.
func TestCacheBounds(t *testing.T) {
	t.Parallel()
	s := httpTransport(t)
	seededRepo(t, s.root, "one")
	seededRepo(t, s.root, "two")
	f := New(Options{Timeout: testTimeout})
	mustFetch(t, f, v1alpha1.GitSource{URL: s.url("one")}, nil)
	mustFetch(t, f, v1alpha1.GitSource{URL: s.url("two")}, nil)
	size, repos := f.CacheBytes()
	if repos != 2 || size == 0 {
		t.Fatalf("the cache holds %d bytes in %d repositories", size, repos)
	}
	f.Keep([]string{s.url("two")})
	if _, repos := f.CacheBytes(); repos != 1 || f.repos[mustKey(t, s.url("two"))] == nil {
		t.Errorf("after Keep(two): %d repositories", repos)
	}
	f.Keep(nil)
	if size, repos := f.CacheBytes(); size != 0 || repos != 0 || len(f.snaps) != 0 || f.flights.Held() != 0 {
		t.Errorf("after Keep(): %d bytes in %d repositories, %d snapshots", size, repos, len(f.snaps))
	}

	// A cache smaller than two repositories keeps the last one fetched.
	small := New(Options{Timeout: testTimeout, MaxCacheBytes: size*3/4 + 1})
	mustFetch(t, small, v1alpha1.GitSource{URL: s.url("one")}, nil)
	mustFetch(t, small, v1alpha1.GitSource{URL: s.url("two")}, nil)
	if got, repos := small.CacheBytes(); got > small.opts.MaxCacheBytes || repos != 1 || small.repos[mustKey(t, s.url("two"))] == nil {
		t.Errorf("a cache of %d bytes holds %d bytes in %d repositories", small.opts.MaxCacheBytes, got, repos)
	}
}

func mustKey(t *testing.T, url string) string {
	t.Helper()
	r, err := parseRemote(url)
	if err != nil {
		t.Fatal(err)
	}
	return r.key
}

// TestDeltaTarget: a delta is checked by the size of what it makes, which
// its small data announces, and cut before go-git builds it.
func TestDeltaTarget(t *testing.T) {
	t.Parallel()
	var pack bytes.Buffer
	pack.WriteString("PACK")
	pack.Write(binary.BigEndian.AppendUint32(nil, 2))
	pack.Write(binary.BigEndian.AppendUint32(nil, 2))
	base := int64(pack.Len())
	gittest.WritePackObject(&pack, 3, []byte("base\n"))
	// A delta on the base (offset from its start, one byte) that makes
	// 500 MB: source size 5, target size 500,000,000, then one insert.
	deltaAt := int64(pack.Len())
	data := []byte{5}
	for v := int64(gittest.BigBlobSize); ; v >>= 7 {
		if v < 0x80 {
			data = append(data, byte(v))
			break
		}
		data = append(data, byte(v&0x7f)|0x80)
	}
	data = append(data, 1, 'x')
	pack.Write(gittest.PackObjectHeader(6, int64(len(data))))
	pack.WriteByte(byte(deltaAt - base))
	zw := zlib.NewWriter(&pack)
	zw.Write(data)
	zw.Close()
	pack.Write(make([]byte, 20)) // the checksum, unchecked here

	g := guardPack(bytes.NewReader(pack.Bytes()), 1<<20, 1<<30)
	handed, err := io.ReadAll(g)
	want := fmt.Sprintf("the server sent an object of %d bytes, over the limit of 1048576 bytes a file", gittest.BigBlobSize)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q", err, want)
	}
	if int64(len(handed)) > deltaAt {
		t.Errorf("%d bytes handed on, past the delta's start at %d", len(handed), deltaAt)
	}
	if got := g.limitErr(context.Background()); got == nil || got.Error() != err.Error() {
		t.Errorf("limitErr = %v, want %v", got, err)
	}
}

// TestHandshakeDeadline: against a server that accepts connections and
// never answers (not the ssh nor the TLS handshake), the fetch's own work
// ends soon after its timeout, not only the caller's wait: the repository
// is free again. Before, an ssh handshake waited for as long as the
// server kept the connection open, holding the repository.
func TestHandshakeDeadline(t *testing.T) {
	t.Parallel()
	port := gittest.Blackhole(t)
	sshAuth := sshAuthFor(t, port)
	for _, tt := range []struct {
		url  string
		auth *Auth
	}{
		{fmt.Sprintf("ssh://git@127.0.0.1:%d/repo.git", port), sshAuth},
		{fmt.Sprintf("https://127.0.0.1:%d/repo.git", port), nil},
		{fmt.Sprintf("git://127.0.0.1:%d/repo.git", port), nil},
	} {
		t.Run(strings.SplitN(tt.url, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			f := New(Options{Timeout: 500 * time.Millisecond})
			fetchErr(t, f, v1alpha1.GitSource{URL: tt.url}, tt.auth)
			cr := f.repo(mustKey(t, tt.url))
			select {
			case cr.lock <- struct{}{}:
				<-cr.lock
			case <-time.After(20 * time.Second):
				t.Fatal("the fetch still holds the repository 20s after its timeout of 500ms")
			}
		})
	}
}

// sshAuthFor is an identity, and known_hosts trusting a new host key on
// 127.0.0.1:port, for servers that never get as far as checking them.
func sshAuthFor(t *testing.T, port int) *Auth {
	t.Helper()
	dir := t.TempDir()
	hostKey := keygen(t, dir, "host", "")
	keygen(t, dir, "client", "")
	return &Auth{
		SSHIdentity: readFile(t, dir+"/client"),
		KnownHosts:  []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", port, hostKey)),
	}
}

// vmHWM is the peak resident set size of the process, as Linux reports it,
// for the log.
func vmHWM() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return "VmHWM: unknown"
}
