package webhook

import (
	"encoding/hex"
	"errors"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestVerify(t *testing.T) {
	body := []byte(`{"ref":"refs/heads/main","after":"abc"}`)
	token := []byte("s3cret")
	sig := hex.EncodeToString(Sign(body, token))
	other := hex.EncodeToString(Sign(body, []byte("other")))
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    error
	}{
		{"github", map[string]string{"X-Hub-Signature-256": "sha256=" + sig}, nil},
		{"github wrong", map[string]string{"X-Hub-Signature-256": "sha256=" + other}, ErrBadSignature},
		{"github no prefix", map[string]string{"X-Hub-Signature-256": sig}, ErrBadSignature},
		{"github not hex", map[string]string{"X-Hub-Signature-256": "sha256=zz"}, ErrBadSignature},
		// A valid Gitea signature does not save a wrong GitHub one.
		{"github first", map[string]string{"X-Hub-Signature-256": "sha256=" + other, "X-Gitea-Signature": sig}, ErrBadSignature},
		{"gitea", map[string]string{"X-Gitea-Signature": sig}, nil},
		{"gitea wrong", map[string]string{"X-Gitea-Signature": other}, ErrBadSignature},
		{"gogs", map[string]string{"X-Gogs-Signature": sig}, nil},
		{"gitlab", map[string]string{"X-Gitlab-Token": "s3cret"}, nil},
		{"gitlab wrong", map[string]string{"X-Gitlab-Token": "s3cre"}, ErrBadSignature},
		{"none", nil, ErrNoSignature},
	} {
		h := http.Header{}
		for k, v := range tc.headers {
			h.Set(k, v)
		}
		if err := Verify(h, body, token); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The body is what is signed.
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256="+sig)
	if err := Verify(h, append(body, ' '), token); !errors.Is(err, ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	if err := Verify(h, body, nil); err == nil {
		t.Error("an empty token verified a call")
	}
}

func TestParsePath(t *testing.T) {
	for path, want := range map[string]types.NamespacedName{
		"/hooks/platform/web":     {Namespace: "platform", Name: "web"},
		"/hooks/platform/web.app": {Namespace: "platform", Name: "web.app"},
		"/hooks/platform/":        {},
		"/hooks/platform":         {},
		"/hooks/a/b/c":            {},
		"/other/a/b":              {},
	} {
		got, ok := parsePath(path)
		if got != want || ok != (want.Name != "") {
			t.Errorf("parsePath(%q) = %v, %v; want %v", path, got, ok, want)
		}
	}
}

func TestParsePush(t *testing.T) {
	for body, want := range map[string]push{
		`{"ref":"refs/heads/main","after":"abc","checkout_sha":"abc"}`: {Ref: "refs/heads/main", After: "abc"},
		`not json`: {},
	} {
		if got := parsePush([]byte(body)); got != want {
			t.Errorf("parsePush(%s) = %+v, want %+v", body, got, want)
		}
	}
}
