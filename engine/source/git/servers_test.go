package git

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// Every server listens on 127.0.0.1, is started by the test that uses it
// and is stopped by t.Cleanup.

// startGitDaemon publishes the repositories under root over git:// and
// returns the address clients should use, through a proxy that counts
// connections.
func startGitDaemon(t *testing.T, root string) *countingProxy {
	t.Helper()
	env := gittest.ServerEnv(t)
	port := gittest.StartServer(t, func(port int) *exec.Cmd {
		cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
			"--base-path="+root, "--listen=127.0.0.1", "--port="+strconv.Itoa(port))
		cmd.Env = env
		return cmd
	})
	return startProxy(t, port)
}

// countingProxy forwards TCP connections to a server and counts them and
// the bytes sent to clients: a ref listing and a fetch each take one
// connection over git:// and ssh.
type countingProxy struct {
	port  int
	conns atomic.Int64
	bytes atomic.Int64

	mu   sync.Mutex
	open map[net.Conn]bool
}

func startProxy(t *testing.T, target int) *countingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{port: l.Addr().(*net.TCPAddr).Port, open: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for c := range p.open {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); p.forward(c, target) }()
		}
	}()
	return p
}

func (p *countingProxy) track(c net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.open[c] = true
	} else {
		delete(p.open, c)
	}
}

func (p *countingProxy) forward(c net.Conn, target int) {
	defer c.Close()
	p.track(c, true)
	defer p.track(c, false)
	s, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(target)))
	if err != nil {
		return
	}
	defer s.Close()
	p.track(s, true)
	defer p.track(s, false)
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(s, c)
		_ = s.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(countingConn{c, &p.bytes}, s)
		_ = c.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// countingConn counts the bytes written to it as they go.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// httpServer publishes the repositories under root with git http-backend
// and counts requests by kind.
type httpServer struct {
	*httptest.Server
	user, password, token string // required credentials, if set

	listings, fetches atomic.Int64
	bytes             atomic.Int64 // sent to clients
	backend           http.Handler
}

func startHTTP(t *testing.T, root string, configure func(*httpServer)) *httpServer {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	s := &httpServer{}
	var stderr gittest.Buffer
	s.backend = &cgi.Handler{
		Path:   gitPath,
		Args:   []string{"http-backend"},
		Env:    append(gittest.ServerEnv(t), "GIT_PROJECT_ROOT="+root, "GIT_HTTP_EXPORT_ALL=1"),
		Stderr: &stderr,
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("git http-backend output:\n%s", stderr.String())
		}
	})
	if configure != nil {
		configure(s)
	}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

func (s *httpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/info/refs"):
		s.listings.Add(1)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		s.fetches.Add(1)
		if os.Getenv("DEBUG_PKT") != "" {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(os.Stderr, "POST %s\n%s\n", r.URL.Path, b)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
	}
	// Bytes are counted before they are sent, so that a client that has
	// read a response sees them counted.
	s.backend.ServeHTTP(&countingWriter{ResponseWriter: w, n: &s.bytes}, r)
}

func (s *httpServer) authorized(r *http.Request) bool {
	switch {
	case s.token != "":
		return r.Header.Get("Authorization") == "Bearer "+s.token
	case s.user != "":
		u, p, ok := r.BasicAuth()
		return ok && u == s.user && p == s.password
	}
	return true
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return w.ResponseWriter.Write(p)
}

// sshServer is an OpenSSH server whose login user is the current user.
type sshServer struct {
	*countingProxy
	user       string
	hostKey    string // public key line, "ssh-ed25519 AAAA..."
	identity   []byte // a private key it accepts
	knownHosts []byte // for the proxy's address
	dir        string
}

// sshdPath finds OpenSSH's server. Without it the ssh tests are skipped
// under -short and fail otherwise: `make test` installs it.
func sshdPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("sshd"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	if testing.Short() {
		t.Skip("sshd not installed")
	}
	t.Fatal("sshd not installed: run `make test`, which installs openssh-server, or install it yourself")
	return ""
}

func startSSHD(t *testing.T) *sshServer {
	t.Helper()
	sshd := sshdPath(t)
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &sshServer{user: u.Username, dir: dir}
	s.hostKey = keygen(t, dir, "host_key", "")
	clientPub := keygen(t, dir, "client_key", "")
	s.identity = readFile(t, filepath.Join(dir, "client_key"))
	writeFile(t, filepath.Join(dir, "authorized_keys"), clientPub+"\n")
	// sshd needs its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	port := gittest.StartServer(t, func(port int) *exec.Cmd {
		config := strings.Join([]string{
			"Port " + strconv.Itoa(port),
			"ListenAddress 127.0.0.1",
			"HostKey " + filepath.Join(dir, "host_key"),
			"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
			"PidFile " + filepath.Join(dir, "sshd.pid"),
			"StrictModes no",
			"UsePAM no",
			"PermitRootLogin prohibit-password",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"PubkeyAuthentication yes",
			"PrintMotd no",
			"UseDNS no",
			"MaxStartups 100",
			"LogLevel ERROR",
		}, "\n") + "\n"
		configFile := filepath.Join(dir, "sshd_config")
		writeFile(t, configFile, config)
		return exec.Command(sshd, "-D", "-e", "-f", configFile)
	})
	s.countingProxy = startProxy(t, port)
	s.knownHosts = []byte(fmt.Sprintf("[127.0.0.1]:%d %s\n", s.port, s.hostKey))
	return s
}

// url returns the ssh URL of the repository at path.
func (s *sshServer) url(path string) string {
	return fmt.Sprintf("ssh://%s@127.0.0.1:%d%s", s.user, s.port, path)
}

// auth returns credentials the server accepts.
func (s *sshServer) auth() *Auth {
	return &Auth{SSHIdentity: s.identity, KnownHosts: s.knownHosts}
}

// keygen makes an ed25519 key pair in dir and returns the public key line
// without its comment.
func keygen(t *testing.T, dir, name, passphrase string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "", "-f", p).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	fields := strings.Fields(string(readFile(t, p+".pub")))
	return fields[0] + " " + fields[1]
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
