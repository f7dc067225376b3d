package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/httpsrc"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// archiveServer serves one tar+gzip on loopback with an ETag (through
// http.ServeContent, which answers If-None-Match) and counts the requests
// and the bodies it sends.
type archiveServer struct {
	*httptest.Server
	mu               sync.Mutex
	body             []byte
	requests, bodies atomic.Int64
}

func newArchiveServer(t *testing.T, body []byte) *archiveServer {
	s := &archiveServer{body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("ETag", `"`+sha256Of(body)[7:23]+`"`)
		if r.Header.Get("If-None-Match") != w.Header().Get("ETag") {
			s.bodies.Add(1)
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *archiveServer) set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
}

func sha256Of(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tgzFiles is a tar+gzip of files.
func tgzFiles(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for p, body := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(len(body)), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
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

// A ManifestSync with an http source syncs the archive pinned by its
// digest (its path built with kustomize), the input revision the digest;
// an unchanged poll downloads nothing (answered 304, counted at the
// server); a server that starts serving other bytes than the pin gets
// SourceFailed "digest mismatch", nothing of them applied, the last good
// objects kept.
func TestHTTPSourceSyncs(t *testing.T) {
	env.Need(t)
	good := tgzFiles(t, map[string]string{
		"config/kustomization.yaml": "resources: [cm.yaml]\nnamePrefix: web-\n",
		"config/cm.yaml":            cmOf("app", "state", "good"),
	})
	srv := newArchiveServer(t, good)
	cache := NewHTTPCache(httpsrc.CacheOptions{Limits: httpsrc.Limits{Timeout: 20 * time.Second}})
	sourceOperator(t, nil, cache)
	ns := remoteEnv.Namespace(t, nil)
	ms := newSync(ns, "http", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "cfg", HTTP: &v1alpha1.HTTPSource{
			URL: srv.URL + "/config.tgz", Digest: sha256Of(good), Insecure: true, Path: "config",
		}}},
		Targets:  targets(ns),
		Interval: &metav1.Duration{Duration: time.Second},
	})
	ctx := context.Background()
	if err := remoteEnv.Client.Create(ctx, ms); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(ms)
	got := remoteEnv.WaitForReason(t, key, v1alpha1.ReasonSynced, time.Minute)
	if rev := got.Status.Inputs.Sources["cfg"]; rev != sha256Of(good) {
		t.Fatalf("input revision %q", rev)
	}
	cm := &corev1.ConfigMap{}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-app"}, cm); err != nil || cm.Data["state"] != "good" {
		t.Fatalf("the archive's ConfigMap: %v, %v", cm.Data, err)
	}

	// Unchanged polls: a request each, no body.
	requests, bodies := srv.requests.Load(), srv.bodies.Load()
	testenv.Eventually(t, time.Minute, func() error {
		if srv.requests.Load() < requests+3 {
			return errors.New("fewer than 3 polls")
		}
		return nil
	})
	if srv.bodies.Load() != bodies {
		t.Fatalf("%d unchanged polls downloaded %d bodies", srv.requests.Load()-requests, srv.bodies.Load()-bodies)
	}
	if n := counterValue(httpFetchesTotal.WithLabelValues(ns, "http", "cfg", "success")); n < 4 {
		t.Errorf("manifestsync_http_fetches_total{result=success} is %v after 4 reads", n)
	}

	// Other bytes than the pin.
	srv.set(tgzFiles(t, map[string]string{
		"config/kustomization.yaml": "resources: [cm.yaml, extra.yaml]\nnamePrefix: web-\n",
		"config/cm.yaml":            cmOf("app", "state", "tampered"),
		"config/extra.yaml":         cmOf("extra", "state", "tampered"),
	}))
	testenv.Eventually(t, time.Minute, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := remoteEnv.Client.Get(ctx, key, cur); err != nil {
			return err
		}
		c := condition(cur, v1alpha1.ConditionReady)
		if c.Reason != v1alpha1.ReasonSourceFailed || !strings.Contains(c.Message, "digest mismatch") || !strings.Contains(c.Message, `source "cfg"`) {
			return fmt.Errorf("ready: %s %q", c.Reason, c.Message)
		}
		t.Logf("other bytes than the pin: %s", c.Message)
		return nil
	})
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-app"}, cm); err != nil || cm.Data["state"] != "good" {
		t.Fatalf("after a digest mismatch, the last good ConfigMap: %v, %v", cm.Data, err)
	}
	if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-extra"}, &corev1.ConfigMap{}); err == nil {
		t.Fatal("an object of the mismatched archive was applied")
	}

	// Once no ManifestSync names the archive, the sweeper lets it go.
	if _, _, _, entries := cache.Stats(); entries != 1 {
		t.Fatalf("%d archives held; want the last good one", entries)
	}
	if err := remoteEnv.Client.Delete(ctx, ms); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if _, _, bytes, entries := cache.Stats(); entries != 0 || bytes != 0 {
			return fmt.Errorf("%d archives, %d bytes held", entries, bytes)
		}
		return nil
	})
}
