// Package registrytest serves Debian's docker-registry (the distribution
// registry) on loopback for tests: OCI charts, images and artifacts are
// pushed to and pulled from a real registry, never a fake. It is for
// tests only; nothing in the product imports it.
package registrytest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Path finds docker-registry. Without it the test fails: `make test`
// installs it (hack/test-deps.sh).
func Path(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("docker-registry"); err == nil {
		return p
	}
	t.Fatal("docker-registry not installed: run `make test` (hack/test-deps.sh installs Debian's docker-registry), or install it yourself")
	return ""
}

// Start serves docker-registry with its storage in a temporary directory
// on a free loopback port, stopped (by its process id) when the test ends,
// and returns its host:port once it serves /v2/ (within 20 s).
func Start(t testing.TB) string {
	t.Helper()
	return StartWith(t, Config{}).Addr
}

// Config says how StartWith serves the registry.
type Config struct {
	// AccessLog turns the registry's access log on (one line per request,
	// in Apache's combined format), for a test to count requests from the
	// registry's own account of them.
	AccessLog bool
	// User and Password, when User is set, make the registry ask for them
	// (its htpasswd access controller, the password stored as bcrypt).
	User, Password string
}

// Registry is a running docker-registry.
type Registry struct {
	// Addr is its host:port on loopback.
	Addr string
	log  string
}

// Log returns what the registry has written to its log so far.
func (r *Registry) Log(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// StartWith is Start with the access log or basic auth of c.
func StartWith(t testing.TB, c Config) *Registry {
	t.Helper()
	bin := Path(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: %t\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		!c.AccessLog, filepath.Join(dir, "data"), addr)
	if c.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(c.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(c.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		config += fmt.Sprintf("auth:\n  htpasswd:\n    realm: registrytest\n    path: %s\n", htpasswd)
	}
	configFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "serve", configFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if res, err := http.Get("http://" + addr + "/v2/"); err == nil {
			res.Body.Close()
			// 401: it serves, and asks for the credentials it was given.
			if res.StatusCode == http.StatusOK || (c.User != "" && res.StatusCode == http.StatusUnauthorized) {
				return &Registry{Addr: addr, log: logFile.Name()}
			}
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("docker-registry exited: %v\n%s", err, log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("docker-registry on %s not serving /v2/ after 20s:\n%s", addr, log)
		}
	}
}
