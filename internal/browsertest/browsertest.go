// Package browsertest drives Debian's Chromium, headless, for the tests of
// the web UI (ui/e2e): it starts one browser with a throwaway profile,
// opens sessions in it (each a browser context of its own: its own cookies,
// as another person's browser), and records what every session saw so that
// a test can grep it: the URL of every request, the body of every response
// (HTML, JSON, JS, CSS), every server-sent event message, and every console
// error (an uncaught exception, console.error, a Content-Security-Policy
// violation). It takes screenshots at a given viewport, light or dark.
//
// The browser is a child of the test process, killed when the test that
// started it ends (and by the kernel should the test process die first);
// every call is bounded by the browser's Timeout. A machine without
// chromium (hack/test-deps.sh installs it) fails the test, or skips it
// under -short.
package browsertest

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Timeout bounds every call a test makes through a Session (and the start
// of the browser) unless Options.Timeout says otherwise.
const Timeout = 30 * time.Second

// Options are how Start starts the browser.
type Options struct {
	// Path is the browser's program; empty: chromium on $PATH.
	Path string
	// Timeout bounds each Session call; 0: the package's Timeout.
	Timeout time.Duration
}

// Browser is one running headless Chromium and what its sessions captured.
type Browser struct {
	timeout time.Duration
	ctx     context.Context // the browser's first tab: it owns the process
	cancel  context.CancelFunc
	pid     int

	closeOnce sync.Once

	mu        sync.Mutex
	requests  []Request
	responses []*Response
	messages  []Message
	console   []string
	missed    []string // responses whose body could not be read
	reading   int      // body reads in flight (under mu)
}

// Request is a request the browser sent.
type Request struct {
	Method, URL string
}

// Response is a response the browser received, with its body once read.
type Response struct {
	URL      string
	Status   int64
	MIMEType string
	Type     network.ResourceType
	Headers  map[string]string
	Body     string
}

// Message is one server-sent event message.
type Message struct {
	URL, Event, Data string
}

// Start starts a headless Chromium for the test t; it is killed when t
// ends, and its profile directory removed.
func Start(t testing.TB, opts Options) *Browser {
	t.Helper()
	path := opts.Path
	if path == "" {
		p, err := exec.LookPath("chromium")
		if err != nil {
			if testing.Short() {
				t.Skip("no chromium (hack/test-deps.sh installs it); skipped under -short")
			}
			t.Fatalf("no chromium on PATH: run hack/test-deps.sh: %v", err)
		}
		path = p
	}
	b := &Browser{timeout: opts.Timeout}
	if b.timeout == 0 {
		b.timeout = Timeout
	}
	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		// A temporary profile is the allocator's default (a directory
		// of its own, removed with the browser); the sandbox needs a
		// user other than root, so as root it is off (the allocator
		// adds --no-sandbox for uid 0 only).
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.WindowSize(1280, 800),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	b.cancel = func() { cancelCtx(); cancelAlloc() }
	if err := b.first(ctx); err != nil {
		b.cancel()
		t.Fatalf("starting %s: %v", path, err)
	}
	if c := chromedp.FromContext(ctx); c != nil && c.Browser != nil && c.Browser.Process() != nil {
		b.pid = c.Browser.Process().Pid
	}
	t.Cleanup(func() { b.Close(t) })
	return b
}

// first makes the first call on a chromedp context, which starts its
// browser or opens its tab, bound to the context it is given: ctx itself,
// not one with a deadline (which would close the tab when it passed); the
// wait is bounded by the browser's timeout instead, after which the caller
// cancels ctx.
func (b *Browser) first(ctx context.Context) error {
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		return err
	case <-time.After(b.timeout):
		return fmt.Errorf("not ready within %s", b.timeout)
	}
}

// Close stops the browser and checks that its process is gone.
func (b *Browser) Close(t testing.TB) {
	t.Helper()
	b.closeOnce.Do(func() { b.close(t) })
}

func (b *Browser) close(t testing.TB) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Cancel closes the browser gracefully, then the allocator kills
		// what is left and removes the profile.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed := make(chan struct{})
		go func() { _ = chromedp.Cancel(b.ctx); close(closed) }()
		select {
		case <-closed:
		case <-ctx.Done():
		}
		b.cancel()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("browser %d: not stopped within 20s", b.pid)
	}
	if b.pid != 0 {
		for deadline := time.Now().Add(5 * time.Second); alive(b.pid); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(b.pid, syscall.SIGKILL)
				t.Errorf("browser %d still ran after it was closed: killed", b.pid)
				break
			}
		}
	}
}

// alive reports whether pid is a running process (not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// listen is the event listener of a tab: it records requests, responses,
// server-sent events and console errors. It runs in the tab's event loop,
// so it runs no command itself: bodies are read by a goroutine, through
// the tab's context (*tab, set once the tab exists).
func (b *Browser) listen(tab *context.Context) func(ev any) {
	pending := map[network.RequestID]*Response{}
	return func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.mu.Lock()
			b.requests = append(b.requests, Request{Method: ev.Request.Method, URL: ev.Request.URL})
			b.mu.Unlock()
		case *network.EventResponseReceived:
			r := &Response{URL: ev.Response.URL, Status: ev.Response.Status, MIMEType: ev.Response.MimeType, Type: ev.Type, Headers: map[string]string{}}
			for k, v := range ev.Response.Headers {
				r.Headers[strings.ToLower(k)] = fmt.Sprint(v)
			}
			b.mu.Lock()
			b.responses = append(b.responses, r)
			b.mu.Unlock()
			if ev.Type != network.ResourceTypeEventSource && ev.Type != network.ResourceTypeImage {
				pending[ev.RequestID] = r
			}
		case *network.EventLoadingFinished:
			r, ok := pending[ev.RequestID]
			delete(pending, ev.RequestID)
			if !ok || tab == nil || *tab == nil {
				return
			}
			ctx := *tab
			b.mu.Lock()
			b.reading++
			b.mu.Unlock()
			go func() {
				defer func() {
					b.mu.Lock()
					b.reading--
					b.mu.Unlock()
				}()
				b.readBody(ctx, ev.RequestID, r)
			}()
		case *network.EventLoadingFailed:
			delete(pending, ev.RequestID)
		case *network.EventEventSourceMessageReceived:
			b.mu.Lock()
			b.messages = append(b.messages, Message{Event: ev.EventName, Data: ev.Data})
			b.mu.Unlock()
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				text += " " + d.Exception.Description
			}
			b.addConsole(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					if len(a.Value) > 0 {
						args = append(args, string(a.Value))
					} else {
						args = append(args, a.Description)
					}
				}
				b.addConsole("console." + string(ev.Type) + ": " + strings.Join(args, " "))
			}
		case *log.EventEntryAdded:
			e := ev.Entry
			// A failed request (an HTTP error status the test asked for,
			// such as a 403 page) is the network's, not the page's: the
			// tests check statuses themselves.
			if e.Level == log.EntryLevelError && e.Source != log.EntrySourceNetwork {
				b.addConsole(fmt.Sprintf("%s error at %s: %s", e.Source, e.URL, e.Text))
			}
		}
	}
}

func (b *Browser) addConsole(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.console = append(b.console, s)
}

// readBody reads the body of a finished response into r.
func (b *Browser) readBody(ctx context.Context, id network.RequestID, r *Response) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id})
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.missed = append(b.missed, fmt.Sprintf("%s (%s): %v", r.URL, r.Type, err))
		return
	}
	body := res.Body
	if res.Base64encoded {
		if dec, err := base64.StdEncoding.DecodeString(string(body)); err == nil {
			body = dec
		}
	}
	r.Body = string(body)
}

// Session is a tab in a browser context of its own: its cookies and
// storage are its own, as another person's browser.
type Session struct {
	b      *Browser
	ctx    context.Context
	cancel context.CancelFunc
}

// NewSession opens a tab in a new browser context; it is closed when t
// ends.
func (b *Browser) NewSession(t testing.TB) *Session {
	t.Helper()
	var tab context.Context
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(b.listen(&tab)))
	s := &Session{b: b, ctx: ctx, cancel: cancel}
	if err := b.first(ctx); err != nil {
		cancel()
		t.Fatalf("opening a tab: %v", err)
	}
	// Bodies are kept outside the renderer, so that a response's body can
	// still be read once the page that fetched it is gone (a fragment
	// fetched just before a click navigates).
	if err := s.Do(func(ctx context.Context, _ *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Call(ctx, network.ConfigureDurableMessages, network.ConfigureDurableMessagesParams{
			MaxTotalBufferSize: new(int64(256 << 20)), MaxResourceBufferSize: new(int64(32 << 20)),
		})
		return chromedp.Void{}, err
	}); err != nil {
		cancel()
		t.Fatalf("keeping response bodies: %v", err)
	}
	tab = ctx
	t.Cleanup(func() {
		// The page is left first (its stream closed, no refetch to come),
		// then the body reads of this tab end before it goes: a response
		// finishing as the tab closed would be one whose body is missed.
		_ = s.Do(chromedp.Navigate("about:blank"))
		b.Settle()
		cancel()
	})
	return s
}

// Context is the session's tab, for chromedp calls the Session does not
// wrap; bound them with a timeout.
func (s *Session) Context() context.Context { return s.ctx }

// Do runs actions in the tab, within the browser's timeout.
func (s *Session) Do(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.b.timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// Run runs one action in the tab, within the browser's timeout, and
// returns its value.
func Run[T any](s *Session, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.b.timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Eval evaluates a JavaScript expression in the tab and decodes its value.
func Eval[T any](s *Session, expr string) (T, error) {
	return Run(s, chromedp.Evaluate[T](expr))
}

// Navigate loads url and returns the main document's HTTP status.
func (s *Session) Navigate(url string) (int64, error) {
	// The page left must have its bodies read first: the browser drops
	// them with it.
	s.b.Settle()
	resp, err := Run(s, chromedp.NavigateResponse(url))
	if err != nil {
		return 0, fmt.Errorf("navigating to %s: %w", url, err)
	}
	if resp == nil {
		return 0, nil
	}
	return resp.Status, nil
}

// Screenshot takes the page as it is (it loads nothing): it sets the viewport to width x height and the
// colour scheme (dark or light), waits a moment for the layout, and writes
// the viewport as a PNG to path (its directory made).
func (s *Session) Screenshot(path string, width, height int64, dark bool) error {
	scheme := "light"
	if dark {
		scheme = "dark"
	}
	if err := s.Emulate(width, height, scheme); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	png, err := Run(s, chromedp.CaptureScreenshot())
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// Emulate sets the viewport (a phone's when width < 600: mobile, touch)
// and prefers-color-scheme (light or dark).
func (s *Session) Emulate(width, height int64, scheme string) error {
	var opts []chromedp.EmulateViewportOption
	if width < 600 {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	return s.Do(
		chromedp.EmulateViewport(width, height, opts...),
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			return chromedp.Void{}, err
		},
	)
}

// Settle waits (at most the browser's timeout) until the bodies of the
// responses received so far are read.
func (b *Browser) Settle() {
	// A count, not a WaitGroup: reads start from the tabs' event loops
	// while a test may be waiting here.
	for deadline := time.Now().Add(b.timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b.mu.Lock()
		n := b.reading
		b.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

// Requests are the requests every session sent, in order.
func (b *Browser) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// Responses are the responses every session received (bodies read so far;
// call Settle first for all of them).
func (b *Browser) Responses() []Response {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Response, len(b.responses))
	for i, r := range b.responses {
		out[i] = *r
	}
	return out
}

// Messages are the server-sent event messages every session received.
func (b *Browser) Messages() []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.messages)
}

// ConsoleErrors are the console errors of every session: uncaught
// exceptions, console.error calls, CSP violations and other browser log
// errors (not failed requests).
func (b *Browser) ConsoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.console)
}

// Missed are the responses whose body could not be read (a page left
// before its body was read), as "URL (type): error".
func (b *Browser) Missed() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.missed)
}

// Find returns where s occurs in what the browser captured: request URLs,
// response bodies and headers, and event messages, each as a short
// description ("body of URL", ...).
func (b *Browser) Find(s string) []string {
	b.Settle()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, r := range b.requests {
		if strings.Contains(r.URL, s) {
			out = append(out, "request URL "+r.URL)
		}
	}
	for _, r := range b.responses {
		if strings.Contains(r.Body, s) {
			out = append(out, "body of "+r.URL)
		}
		for k, v := range r.Headers {
			if strings.Contains(v, s) {
				out = append(out, "header "+k+" of "+r.URL)
			}
		}
	}
	for _, m := range b.messages {
		if strings.Contains(m.Data, s) {
			out = append(out, "event "+m.Event+": "+m.Data)
		}
	}
	return out
}

// WaitJS polls the JavaScript expression (a boolean) in the page every
// 50ms until it is true, at most for within; it returns the last error of
// the evaluation, or says the expression stayed false.
func (s *Session) WaitJS(expr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		ok, err := Eval[bool](s, expr)
		if err == nil && ok {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			if last == nil {
				last = fmt.Errorf("%s stayed false for %s", expr, within)
			}
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
}
