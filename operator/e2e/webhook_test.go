package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

// startReceiver serves the webhook receiver of op on a free port of
// 127.0.0.1, as `engine operator --webhook-bind-address` does, and returns
// its base URL.
func startReceiver(t *testing.T, op *operator) string {
	t.Helper()
	rc := &webhook.Receiver{Client: op.mgr.GetClient(), Secrets: op.mgr.GetAPIReader(), Log: ctrl.Log.WithName("webhook")}
	srv := webhook.NewServer("127.0.0.1:0", rc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	})
	select {
	case addr := <-srv.Listening():
		return "http://" + addr.(*net.TCPAddr).String()
	case err := <-done:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("the webhook server does not listen")
	}
	return ""
}

// post sends body to url with the headers and returns the status code.
func post(t *testing.T, url string, body []byte, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// A push notification signed with the ManifestSync's webhook secret makes
// it sync a new commit at once, though its interval is an hour; one signed
// with another secret, or not at all, is refused and changes nothing.
func TestWebhook(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home, target := env.Namespace(t, nil), env.Namespace(t, nil)
	op := startOperator(t, controller.Options{}, home)
	base := startReceiver(t, op)
	r := newRepo(t)
	r.commit(map[string]string{"web.yaml": configMap("web", "version", "1")})

	token := []byte("hook-s3cret")
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "hook"}, Data: map[string][]byte{webhook.SecretKey: token}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ms := &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "web", Annotations: map[string]string{webhook.SecretAnnotation: "hook"}},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources:  []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{URL: r.URL, Ref: v1alpha1.GitRef{Branch: "main"}}}},
			Targets:  []v1alpha1.Target{{Name: "prod", Namespace: target}},
			Interval: &metav1.Duration{Duration: time.Hour},
		},
	}
	key := client.ObjectKeyFromObject(ms)
	createSync(t, ms)
	waitFor(t, key, v1alpha1.ReasonSynced)
	eventually(t, timeout, hasData(target, "web", "version", "1"))
	// Let the reconciles that the first sync caused (its finalizer) end
	// before the commit, so that only the webhook can bring it.
	time.Sleep(500 * time.Millisecond)

	after := r.commit(map[string]string{"web.yaml": configMap("web", "version", "2")})
	payload := fmt.Appendf(nil, `{"ref":"refs/heads/main","before":"0000","after":%q,"repository":{"full_name":"org/config"}}`, after)
	url := base + "/hooks/" + home + "/web"
	github := func(tok []byte) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "Content-Type": "application/json",
			"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(webhook.Sign(payload, tok))}
	}

	before := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, key, before); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		url     string
		headers map[string]string
		want    int
	}{
		"wrong secret": {url, github([]byte("guess")), http.StatusUnauthorized},
		"no signature": {url, map[string]string{"X-GitHub-Event": "push"}, http.StatusUnauthorized},
		"wrong token":  {url, map[string]string{"X-Gitlab-Token": "guess"}, http.StatusUnauthorized},
		"unknown":      {base + "/hooks/" + home + "/nope", github(token), http.StatusNotFound},
	} {
		if got := post(t, tc.url, payload, tc.headers); got != tc.want {
			t.Errorf("%s: status %d, want %d", name, got, tc.want)
		}
	}
	time.Sleep(time.Second)
	if got, err := configMapData(target, "web", "version"); err != nil || got != "1" {
		t.Errorf("after refused calls, version is %q (%v), want 1", got, err)
	}
	now := &v1alpha1.ManifestSync{}
	if err := env.Client.Get(ctx, key, now); err != nil {
		t.Fatal(err)
	}
	if _, ok := now.Annotations[webhook.RequestedAtAnnotation]; ok || now.ResourceVersion != before.ResourceVersion {
		t.Errorf("refused calls changed the ManifestSync: annotations %v", now.Annotations)
	}

	start := time.Now()
	if got := post(t, url, payload, github(token)); got != http.StatusAccepted {
		t.Fatalf("signed call: status %d, want 202", got)
	}
	eventually(t, timeout, hasData(target, "web", "version", "2")) // the interval is an hour
	t.Logf("a signed webhook call synced commit %s in %v", after[:12], time.Since(start).Round(time.Millisecond))

	// Gitea's and GitLab's ways are accepted too.
	for name, h := range map[string]map[string]string{
		"gitea":  {"X-Gitea-Event": "push", "X-Gitea-Signature": hex.EncodeToString(webhook.Sign(payload, token))},
		"gitlab": {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": string(token)},
	} {
		if got := post(t, url, payload, h); got != http.StatusAccepted {
			t.Errorf("%s: status %d, want 202", name, got)
		}
	}
}
