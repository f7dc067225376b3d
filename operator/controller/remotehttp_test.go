package controller

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// What a peer answers reaches client-go only when it is the API's own: a
// Status (an API server's 403 names the user and verb: kept), an object,
// or a watch's stream; anything else becomes a fixed text with the status
// code. What a hostile "cluster" (an internal HTTP service) gets through:
// its status code, nothing of its body.
func TestWithholdBody(t *testing.T) {
	const marker = "internal-page-marker"
	status := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps is forbidden: User \"u\" cannot list","reason":"Forbidden","code":403}`
	for _, c := range []struct {
		name, url, ctype, body string
		code                   int
		kept                   bool
		wantCode               int
	}{
		{"an API server's Status", "/api/v1/configmaps", "application/json", status, 403, true, 403},
		{"an HTML error page", "/api/v1/namespaces/x", "text/html", "<h1>" + marker + "</h1>", 500, false, 500},
		{"a text error", "/api", "text/plain", marker, 502, false, 502},
		{"a JSON error that is no Status", "/api", "application/json", `{"error": "` + marker + `"}`, 404, false, 404},
		{"a success that is no object", "/api/v1/namespaces/x", "application/json", `{"secret": "` + marker + `"}`, 200, false, 502},
		{"an object", "/api/v1/namespaces/x", "application/json", `{"kind": "Namespace", "metadata": {"name": "` + marker + `"}}`, 200, true, 200},
		{"a watch's stream", "/api/v1/configmaps?watch=true", "application/json", `{"type": "ADDED"` + marker, 200, true, 200},
		{"a probe's answer", "/readyz", "text/plain", "ok " + marker, 200, true, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, c.url, nil)
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", c.ctype)
			rec.WriteHeader(c.code)
			_, _ = rec.WriteString(c.body)
			resp, err := withholdBody(req, rec.Result())
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(raw) == c.body; got != c.kept {
				t.Errorf("body kept: %v, want %v; body %q", got, c.kept, raw)
			}
			if !c.kept && (strings.Contains(string(raw), marker) || !strings.Contains(string(raw), "withheld")) {
				t.Errorf("withheld body %q", raw)
			}
			if resp.StatusCode != c.wantCode {
				t.Errorf("code %d, want %d", resp.StatusCode, c.wantCode)
			}
		})
	}
}
