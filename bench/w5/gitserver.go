package w5

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// kind is what one request to the git server asks for.
type kind int

const (
	// kindCaps is the capability advertisement of protocol v2, which
	// lists no refs.
	kindCaps kind = iota
	// kindListing lists the refs: the advertisement of protocol v0/v1
	// (what go-git speaks) or the ls-refs command of v2.
	kindListing
	// kindFetch asks for objects.
	kindFetch
	kindOther
)

// classify tells what a request to git http-backend is: method, URL path,
// the Git-Protocol header and the request body, decoded.
func classify(method, path, protocol string, body []byte) kind {
	switch {
	case method == http.MethodGet && strings.HasSuffix(path, "/info/refs"):
		if strings.Contains(protocol, "version=2") {
			return kindCaps
		}
		return kindListing
	case method == http.MethodPost && strings.HasSuffix(path, "/git-upload-pack"):
		switch {
		case bytes.Contains(body, []byte("command=ls-refs")):
			return kindListing
		case bytes.Contains(body, []byte("command=fetch")), bytes.Contains(body, []byte("want ")):
			return kindFetch
		}
	}
	return kindOther
}

// counts are the requests a git server served, by kind.
type counts struct {
	Requests, Listings, Fetches float64
}

func (c counts) sub(o counts) counts {
	return counts{Requests: c.Requests - o.Requests, Listings: c.Listings - o.Listings, Fetches: c.Fetches - o.Fetches}
}

// gitServer serves the bare repositories under a root over smart HTTP on
// 127.0.0.1 with git http-backend, counting the requests by kind.
type gitServer struct {
	URL string // a repository root/NAME.git is at URL + "/NAME.git"

	srv                         *http.Server
	requests, listings, fetches atomic.Int64
}

// startGitServer serves root; home is git's HOME, an empty directory.
func startGitServer(root, home string) (*gitServer, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git http-backend: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &gitServer{URL: "http://" + l.Addr().String()}
	cgiHandler := &cgi.Handler{
		Path: backend,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1",
			"PATH=" + os.Getenv("PATH"), "HOME=" + home,
			"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		},
	}
	s.srv = &http.Server{Handler: s.count(cgiHandler), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// count wraps h, classifying every request before h serves it.
func (s *gitServer) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
			body = raw
			if r.Header.Get("Content-Encoding") == "gzip" {
				if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
					body, _ = io.ReadAll(io.LimitReader(zr, 1<<20))
				}
			}
		}
		s.requests.Add(1)
		switch classify(r.Method, r.URL.Path, r.Header.Get("Git-Protocol"), body) {
		case kindListing:
			s.listings.Add(1)
		case kindFetch:
			s.fetches.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

// counts returns what the server has served so far.
func (s *gitServer) counts() counts {
	return counts{Requests: float64(s.requests.Load()), Listings: float64(s.listings.Load()), Fetches: float64(s.fetches.Load())}
}

func (s *gitServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
