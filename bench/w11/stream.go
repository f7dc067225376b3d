package w11

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// change is the data of an event stream's `event: change`.
type change struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// sseEvent is one server-sent event: its type ("message" when the
// server names none) and its data lines joined by newlines.
type sseEvent struct {
	typ, data string
}

// readEvents reads server-sent events from r and sends each to fn until
// r ends or fn returns false. Comments (": ...") and other fields (id,
// retry) are skipped; a line is bounded (64 KiB).
func readEvents(r io.Reader, fn func(sseEvent) bool) error {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 4096), 64<<10)
	var ev sseEvent
	var data []string
	for s.Scan() {
		line := s.Text()
		if line == "" {
			if len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				if ev.typ == "" {
					ev.typ = "message"
				}
				if !fn(ev) {
					return nil
				}
			}
			ev, data = sseEvent{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.typ = value
		case "data":
			data = append(data, value)
		}
	}
	return s.Err()
}

// streams are event streams held open, each a GET /stream on a
// connection of its own, as as many browser tabs hold them.
type streams struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// seen are the times each stream received a change of a watched
	// ManifestSync, by stream; errs the streams that ended early.
	seen map[int]time.Time
	errs []error
}

// openStreams opens n streams of url/stream and returns once each has its
// response headers (the server flushes them on connect, as EventSource's
// open event needs), or fails; a stream reports a change of ns/name when
// it arrives.
func openStreams(ctx context.Context, url string, n int, ns, name string) (*streams, error) {
	ctx, cancel := context.WithCancel(ctx)
	st := &streams{cancel: cancel, seen: map[int]time.Time{}}
	// A transport of their own: n connections, no idle pool to share.
	tr := &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}
	hc := &http.Client{Transport: tr}
	opened := make(chan error, n)
	for i := range n {
		st.wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/stream", nil)
			if err != nil {
				opened <- err
				return
			}
			req.Header.Set("Accept", "text/event-stream")
			resp, err := hc.Do(req)
			if err != nil {
				opened <- fmt.Errorf("GET /stream: %w", err)
				return
			}
			defer resp.Body.Close()
			mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
			if resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				opened <- fmt.Errorf("GET /stream: %s, Content-Type %q: %s", resp.Status, resp.Header.Get("Content-Type"), body)
				return
			}
			opened <- nil
			err = readEvents(resp.Body, func(ev sseEvent) bool {
				var c change
				if ev.typ == "change" && json.Unmarshal([]byte(ev.data), &c) == nil && c.Kind == "ManifestSync" && c.Namespace == ns && c.Name == name {
					st.mu.Lock()
					if _, ok := st.seen[i]; !ok {
						st.seen[i] = time.Now()
					}
					st.mu.Unlock()
				}
				return true
			})
			if err != nil && ctx.Err() == nil {
				st.mu.Lock()
				st.errs = append(st.errs, fmt.Errorf("stream %d: %w", i, err))
				st.mu.Unlock()
			}
		})
	}
	timeout := time.After(10 * time.Second)
	for k := range n {
		select {
		case err := <-opened:
			if err != nil {
				st.close()
				return nil, err
			}
		case <-timeout:
			st.close()
			return nil, fmt.Errorf("%d of %d event streams had their response headers within 10s (a stream should flush them on connect)", k, n)
		}
	}
	return st, nil
}

// waitSeen waits until every one of n streams has seen the change, or
// timeout passes, and returns how many saw it and when the last did.
func (st *streams) waitSeen(n int, timeout time.Duration) (int, time.Time) {
	deadline := time.Now().Add(timeout)
	for {
		st.mu.Lock()
		got := len(st.seen)
		var last time.Time
		for _, t := range st.seen {
			if t.After(last) {
				last = t
			}
		}
		st.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return got, last
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// close ends every stream and waits for their readers.
func (st *streams) close() {
	st.cancel()
	st.wg.Wait()
}
