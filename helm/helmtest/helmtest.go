// Package helmtest serves Helm charts on loopback for tests: a chart
// repository (index.yaml and archives, answering conditional requests,
// counting what it sends) and Debian's docker-registry as an OCI registry,
// with charts packaged in memory.
package helmtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Chart returns the files of a small chart: Chart.yaml, values.yaml and a
// ConfigMap template, with extra files added (or replacing those).
func Chart(name, version string, extra map[string]string) map[string]string {
	files := map[string]string{
		"Chart.yaml":  fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version),
		"values.yaml": "greeting: hello\n",
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-" + name +
			"\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  version: " + version + "\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	return files
}

// Entry is one archive entry of Archive: a regular file unless Type says
// otherwise (a link's target in Link).
type Entry struct {
	Name string
	Data string
	Type byte
	Link string
}

// Package returns the archive of a chart as helm package makes it: a
// gzipped tar of the directory name/ holding files, entries sorted, times
// zero, so the same files give the same bytes (and digest).
func Package(name string, files map[string]string) []byte {
	var entries []Entry
	for _, p := range slices.Sorted(mapsKeys(files)) {
		entries = append(entries, Entry{Name: name + "/" + p, Data: files[p]})
	}
	return Archive(entries)
}

// Archive writes entries as a gzipped tar, as they are: hostile ones too.
func Archive(entries []Entry) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		hd := &tar.Header{Name: e.Name, Typeflag: typ, Linkname: e.Link, Mode: 0o644, Size: int64(len(e.Data))}
		if typ != tar.TypeReg {
			hd.Size = 0
		}
		if err := tw.WriteHeader(hd); err != nil {
			panic(err)
		}
		if typ == tar.TypeReg {
			_, _ = tw.Write([]byte(e.Data))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Digest is "sha256:HEX" of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Repo is a chart repository served over http on 127.0.0.1.
type Repo struct {
	URL string

	// IndexBodies counts index.yaml answers with a body (200), NotModified
	// those answered 304, Charts the archives sent, Requests every request.
	IndexBodies, NotModified, Charts, Requests atomic.Int64

	mu       sync.Mutex
	charts   map[string][]chartVersion
	files    map[string][]byte
	modified time.Time
	user     string
	password string
	// Handler, when set, answers every request in place of the repository.
	handler http.Handler
}

type chartVersion struct {
	version, file, digest string
	omitDigest            bool
}

// NewRepo serves an empty repository over http until the test ends.
func NewRepo(t testing.TB) *Repo {
	t.Helper()
	r, _ := newRepo(t, httptest.NewServer)
	return r
}

// NewTLSRepo is NewRepo over https, with a certificate of its own CA,
// whose PEM it returns.
func NewTLSRepo(t testing.TB) (*Repo, []byte) {
	t.Helper()
	return newRepo(t, httptest.NewTLSServer)
}

func newRepo(t testing.TB, serve func(http.Handler) *httptest.Server) (*Repo, []byte) {
	r := &Repo{charts: map[string][]chartVersion{}, files: map[string][]byte{}, modified: time.Now().UTC().Truncate(time.Second)}
	srv := serve(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	var ca []byte
	if c := srv.Certificate(); c != nil {
		ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return r, ca
}

// RequireAuth makes the repository answer 401 to requests without these
// credentials.
func (r *Repo) RequireAuth(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.password = user, password
}

// Serve makes h answer every request, in place of the repository.
func (r *Repo) Serve(h http.Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handler = h
}

// Add publishes the archive tgz as chart name at version; the index
// changes (a new ETag and Last-Modified).
func (r *Repo) Add(name, version string, tgz []byte) {
	r.add(name, version, tgz, false)
}

// AddWithoutDigest is Add with no digest in the index.
func (r *Repo) AddWithoutDigest(name, version string, tgz []byte) {
	r.add(name, version, tgz, true)
}

func (r *Repo) add(name, version string, tgz []byte, omitDigest bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	file := fmt.Sprintf("%s-%s.tgz", name, version)
	r.files[file] = tgz
	r.charts[name] = append(r.charts[name], chartVersion{version: version, file: file, digest: strings.TrimPrefix(Digest(tgz), "sha256:"), omitDigest: omitDigest})
	// Last-Modified has a resolution of a second: make it move.
	r.modified = r.modified.Add(time.Second)
	if now := time.Now().UTC().Truncate(time.Second); now.After(r.modified) {
		r.modified = now
	}
}

// Tamper replaces the archive of chart name at version with tgz, leaving
// the index (and its digest) as it is.
func (r *Repo) Tamper(name, version string, tgz []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.files[fmt.Sprintf("%s-%s.tgz", name, version)] = tgz
}

// index renders index.yaml, and its ETag.
func (r *Repo) index() ([]byte, string) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nentries:\n")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range r.charts {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "  %s:\n", name)
		for _, v := range r.charts[name] {
			fmt.Fprintf(&b, "  - apiVersion: v2\n    name: %s\n    version: %s\n    urls:\n    - %s\n", name, v.version, v.file)
			if !v.omitDigest {
				fmt.Fprintf(&b, "    digest: %s\n", v.digest)
			}
		}
	}
	fmt.Fprintf(&b, "generated: %q\n", r.modified.Format(time.RFC3339))
	body := []byte(b.String())
	return body, `"` + Digest(body)[7:23] + `"`
}

func (r *Repo) serve(w http.ResponseWriter, req *http.Request) {
	r.Requests.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handler != nil {
		r.handler.ServeHTTP(w, req)
		return
	}
	if r.user != "" || r.password != "" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
			http.Error(w, "no entry: the password "+p+" is wrong", http.StatusUnauthorized)
			return
		}
	}
	p := strings.TrimPrefix(req.URL.Path, "/")
	if p == "index.yaml" {
		body, etag := r.index()
		w.Header().Set("ETag", etag)
		w.Header().Set("Last-Modified", r.modified.Format(http.TimeFormat))
		if req.Header.Get("If-None-Match") == etag {
			r.NotModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		r.IndexBodies.Add(1)
		_, _ = w.Write(body)
		return
	}
	if b, ok := r.files[p]; ok {
		r.Charts.Add(1)
		_, _ = w.Write(b)
		return
	}
	http.NotFound(w, req)
}

// Push pushes the chart archive tgz to repo (HOST/PATH/CHART) at tag, as
// helm push lays it out: a Helm config and one chart layer.
func Push(t testing.TB, repo, tag string, tgz []byte) {
	t.Helper()
	ref, err := name.NewTag(repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	layer := static.NewLayer(tgz, types.MediaType("application/vnd.cncf.helm.chart.content.v1.tar+gzip"))
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.MediaType("application/vnd.cncf.helm.config.v1+json"))
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
}
