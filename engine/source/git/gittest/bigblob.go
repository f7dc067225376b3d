package gittest

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BigBlobSize is what the blob of BigBlobServer holds: 500 MB of zeros,
// about 500 kB on the wire.
const BigBlobSize = 500_000_000

// bigBlob is the deflated content of the big blob and its object hash,
// made once a process (a second or two of CPU, nothing on disk).
var bigBlob = sync.OnceValues(func() ([]byte, [20]byte) {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestSpeed)
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", BigBlobSize)
	zeros := make([]byte, 1<<20)
	w := io.MultiWriter(zw, h)
	for range BigBlobSize / len(zeros) {
		_, _ = w.Write(zeros)
	}
	zw.Close()
	var sum [20]byte
	copy(sum[:], h.Sum(nil))
	return z.Bytes(), sum
})

// BigBlobServer serves over smart http on 127.0.0.1, at every path, a
// repository whose only commit holds big.yaml, a blob of BigBlobSize
// bytes, in the pack git would send (commit, tree, blob), streamed from
// memory. It returns its URL (add "/NAME.git") and the count of pack
// bytes it sent; it is closed when the test ends.
func BigBlobServer(t testing.TB) (url string, sent *atomic.Int64) {
	t.Helper()
	blobZ, blobHash := bigBlob()
	tree := append([]byte("100644 big.yaml\x00"), blobHash[:]...)
	treeHash := objectHash("tree", tree)
	commit := fmt.Appendf(nil, "tree %x\nauthor A <a@example.com> 0 +0000\ncommitter A <a@example.com> 0 +0000\n\nbig\n", treeHash)
	commitHash := fmt.Sprintf("%x", objectHash("commit", commit))
	sent = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/info/refs"):
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			_, _ = io.WriteString(w, pkt("# service=git-upload-pack\n")+"0000"+
				pkt(commitHash+" HEAD\x00shallow no-progress ofs-delta symref=HEAD:refs/heads/main agent=git/test\n")+
				pkt(commitHash+" refs/heads/main\n")+"0000")
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			_, _ = io.WriteString(w, pkt("shallow "+commitHash+"\n")+"0000"+pkt("NAK\n"))
			h := sha1.New()
			out := io.MultiWriter(h, countingWriter{w, sent})
			hdr := binary.BigEndian.AppendUint32([]byte("PACK"), 2)
			hdr = binary.BigEndian.AppendUint32(hdr, 3)
			_, _ = out.Write(hdr)
			WritePackObject(out, 1, commit)
			WritePackObject(out, 2, tree)
			_, _ = out.Write(PackObjectHeader(3, BigBlobSize))
			for rest := blobZ; len(rest) > 0; rest = rest[min(len(rest), 32<<10):] {
				if _, err := out.Write(rest[:min(len(rest), 32<<10)]); err != nil {
					return // the client hung up
				}
			}
			_, _ = w.Write(h.Sum(nil))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, sent
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func objectHash(kind string, content []byte) [20]byte {
	return sha1.Sum(append(fmt.Appendf(nil, "%s %d\x00", kind, len(content)), content...))
}

// PackObjectHeader is the header of an object of a pack: its type (1
// commit, 2 tree, 3 blob, 6 offset delta) and inflated size.
func PackObjectHeader(typ byte, size int64) []byte {
	b := []byte{typ<<4 | byte(size&0x0f)}
	size >>= 4
	for size > 0 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
		size >>= 7
	}
	return b
}

// WritePackObject writes an object of a pack: its header and its content,
// deflated.
func WritePackObject(w io.Writer, typ byte, content []byte) {
	_, _ = w.Write(PackObjectHeader(typ, int64(len(content))))
	zw := zlib.NewWriter(w)
	_, _ = zw.Write(content)
	zw.Close()
}

// HeapPeak samples the bytes of live heap objects of the process until
// stop is called, which returns the highest sample.
func HeapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak }
}
