package w11

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/manifestsync/manifestsync/bench/harness"
)

// uiProcess is `engine ui` running as a process of its own, as a user runs
// it: the admin kubeconfig, a free loopback port.
type uiProcess struct {
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:PORT (no trailing slash)
	log  *os.File
	done chan error
}

// servingLine is what engine ui prints once it listens.
var servingLine = regexp.MustCompile(`^ui: serving on (http://\S+?)/?$`)

// startUI starts engine ui and waits until it prints its address; its
// output goes to logFile.
func startUI(ctx context.Context, engineBin, kubeconfig, logFile string) (*uiProcess, error) {
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(engineBin, "ui", "--kubeconfig", kubeconfig, "--addr", "127.0.0.1:0")
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting engine ui: %w", err)
	}
	p := &uiProcess{cmd: cmd, log: log, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if m := servingLine.FindStringSubmatch(s.Text()); m != nil {
				select { // the first address; the reader never blocks
				case addr <- m[1]:
				default:
				}
			}
			fmt.Fprintln(log, s.Text())
		}
		p.done <- cmd.Wait()
	}()
	select {
	case p.url = <-addr:
		return p, nil
	case err := <-p.done:
		p.done <- err
		log.Close()
		return nil, fmt.Errorf("engine ui exited before serving (log: %s): %v", logFile, err)
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	_ = p.stop()
	return nil, fmt.Errorf("engine ui printed no address within 30s (log: %s)", logFile)
}

// stop interrupts engine ui and waits for it to exit.
func (p *uiProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.log.Close()
}

// rss is the resident set of the process now (VmRSS), bytes.
func (p *uiProcess) rss() (int64, error) {
	return harness.ProcStatus(p.cmd.Process.Pid, "VmRSS")
}

// page is one GET of a page: its body, the server's own handling time
// (Server-Timing: app;dur=MS) and the time the client waited.
type page struct {
	body   []byte
	server time.Duration
	client time.Duration
}

// get fetches path and checks it is a 200 page.
func get(ctx context.Context, hc *http.Client, url string) (page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return page{}, err
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return page{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	took := time.Since(start)
	if err != nil {
		return page{}, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return page{}, fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, body)
	}
	p := page{body: body, client: took, server: -1}
	// The header, or a trailer of the same name (a server that streams
	// its page can only tell its time after it).
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		if d, ok := serverTiming(h.Values("Server-Timing"), "app"); ok {
			p.server = d
		}
	}
	return p, nil
}

// serverTiming finds metric name's dur in Server-Timing header values
// ("app;dur=12.5, db;dur=3": milliseconds, RFC-less W3C syntax).
func serverTiming(values []string, name string) (time.Duration, bool) {
	for _, v := range values {
		for metric := range strings.SplitSeq(v, ",") {
			parts := strings.Split(metric, ";")
			if strings.TrimSpace(parts[0]) != name {
				continue
			}
			for _, param := range parts[1:] {
				k, val, ok := strings.Cut(strings.TrimSpace(param), "=")
				if !ok || strings.TrimSpace(k) != "dur" {
					continue
				}
				ms, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(val), `"`), 64)
				if err != nil || ms < 0 {
					return 0, false
				}
				return time.Duration(ms * float64(time.Millisecond)), true
			}
		}
	}
	return 0, false
}

// rowsOf counts the ManifestSync rows of an overview page
// (tr[data-ms="NS/NAME"], the contract's DOM).
func rowsOf(body []byte) int {
	return bytes.Count(body, []byte(`data-ms="`))
}

// waitListed waits until the overview lists want ManifestSyncs: the UI's
// informer has synced.
func waitListed(ctx context.Context, hc *http.Client, url string, want int) error {
	deadline := time.Now().Add(time.Minute)
	last := "no page"
	for time.Now().Before(deadline) {
		p, err := get(ctx, hc, url+"/")
		switch {
		case err != nil:
			last = err.Error()
		case rowsOf(p.body) == want:
			return nil
		default:
			last = fmt.Sprintf("%d rows", rowsOf(p.body))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("the overview did not list %d ManifestSyncs within a minute (last: %s)", want, last)
}

// watches is the API server's count of watches being served, from its
// own metrics: the long-running requests of verb WATCH
// (apiserver_longrunning_requests, a gauge by resource and scope), and,
// beside it, the watchers registered in its watch cache
// (apiserver_registered_watchers, by kind) where this version exports it
// (-1 otherwise).
type watches struct {
	longrunning float64
	registered  float64
}

// readWatches reads the API server's watch counts.
func readWatches(ctx context.Context, cfg *rest.Config) (watches, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return watches{}, err
	}
	// The two families it reads alone (name[], as testenv.ReadRequests).
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").
		Param("name[]", "apiserver_longrunning_requests").Param("name[]", "apiserver_registered_watchers").DoRaw(ctx)
	if err != nil {
		return watches{}, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseWatches(raw)
}

func parseWatches(raw []byte) (watches, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return watches{}, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	lr, ok := families["apiserver_longrunning_requests"]
	if !ok {
		return watches{}, errors.New("the API server's metrics have no apiserver_longrunning_requests")
	}
	w := watches{registered: -1}
	for _, m := range lr.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" && l.GetValue() == "WATCH" {
				w.longrunning += m.GetGauge().GetValue()
			}
		}
	}
	if rw, ok := families["apiserver_registered_watchers"]; ok {
		w.registered = 0
		for _, m := range rw.GetMetric() {
			w.registered += m.GetGauge().GetValue()
		}
	}
	return w, nil
}
