package browsertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// page is a document under a strict CSP with one allowed script (which
// fetches JSON and opens an event stream) and one inline script, which the
// CSP must refuse.
const page = `<!doctype html><html><head><meta name="viewport" content="width=device-width, initial-scale=1"><title>t</title><script src="/app.js"></script></head>
<body><p id="p">hello-body</p><script>window.inline = 1</script></body></html>`

const script = `fetch('/data.json').then(r => r.json()).then(d => { window.data = d.v });
const es = new EventSource('/stream'); es.addEventListener('change', e => { window.got = e.data; });`

func server(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, script)
	})
	mux.HandleFunc("/set", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "who", Value: "first", Path: "/"})
		fmt.Fprint(w, "set")
	})
	mux.HandleFunc("/data.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"v":"json-value"}`)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: change\ndata: {\"name\":\"sse-value\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestCapture(t *testing.T) {
	ts := server(t)
	b := Start(t, Options{})
	s := b.NewSession(t)
	status, err := s.Navigate(ts.URL + "/")
	if err != nil || status != 200 {
		t.Fatalf("navigate: %d, %v", status, err)
	}
	if err := s.WaitJS(`window.data === "json-value" && window.got !== undefined`, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b.Settle()
	for _, want := range []string{"hello-body", "json-value", "sse-value", "window.got"} {
		if len(b.Find(want)) == 0 {
			t.Errorf("%q not captured; responses: %+v, messages: %+v, missed: %v", want, b.Responses(), b.Messages(), b.Missed())
		}
	}
	// The inline script broke the CSP: a console error.
	inline, err := Eval[bool](s, `window.inline === 1`)
	if err != nil || inline {
		t.Errorf("the inline script ran (%v, %v)", inline, err)
	}
	var csp bool
	for deadline := time.Now().Add(5 * time.Second); !csp && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, e := range b.ConsoleErrors() {
			csp = csp || strings.Contains(e, "Content Security Policy")
		}
	}
	if !csp {
		t.Errorf("no CSP violation among the console errors: %q", b.ConsoleErrors())
	}
	urls := b.Requests()
	if len(urls) < 4 {
		t.Errorf("requests: %v", urls)
	}
	// A screenshot, a phone's and dark.
	path := filepath.Join(t.TempDir(), "x.png")
	if err := s.Screenshot(path, 390, 844, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() < 100 {
		t.Errorf("screenshot: %v, %v", fi, err)
	}
	dark, err := Eval[bool](s, `matchMedia('(prefers-color-scheme: dark)').matches`)
	if err != nil || !dark {
		t.Errorf("emulation: dark is %v (%v)", dark, err)
	}
	width, err := Eval[int](s, `innerWidth`)
	if err != nil || width != 390 {
		t.Errorf("emulation: innerWidth is %d (%v), want 390", width, err)
	}
	// Sessions do not share cookies.
	first, second := b.NewSession(t), b.NewSession(t)
	if _, err := first.Navigate(ts.URL + "/set"); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Navigate(ts.URL + "/set"); err != nil {
		t.Fatal(err)
	}
	if _, err := Eval[bool](second, `(document.cookie = "who=second; path=/", true)`); err != nil {
		t.Fatal(err)
	}
	if c, err := Eval[string](first, `document.cookie`); err != nil || c != "who=first" {
		t.Errorf("the first session's cookies are %q (%v), want who=first", c, err)
	}
	pid := b.pid
	if pid == 0 {
		t.Fatal("no browser pid")
	}
	b.Close(t)
	if alive(pid) {
		t.Errorf("browser %d alive after Close", pid)
	}
}
