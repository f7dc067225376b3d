package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Operator is `engine operator` running as a process of its own against a
// Cluster, so that its CPU, memory and requests are its own.
type Operator struct {
	cmd     *exec.Cmd
	metrics string // URL of its Prometheus endpoint
	log     *os.File
	done    chan error
}

// TrustAll is the flag of `engine operator` that trusts every namespace:
// the benchmarks' ManifestSyncs are a platform team's, writing into the
// namespaces they fan out to, and the write gate (which a tenant's
// ManifestSync goes through) is not what they measure.
const TrustAll = "--trusted-namespaces=*"

// StartOperator starts the engine binary's operator command against c,
// with its metrics on a free loopback port, extra flags appended; its log
// goes to logFile.
func StartOperator(ctx context.Context, c *Cluster, engineBin, logFile string, flags ...string) (*Operator, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	args := append([]string{"operator", "--kubeconfig", c.Kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0", TrustAll}, flags...)
	cmd := exec.Command(engineBin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	o := &Operator{cmd: cmd, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), log: log, done: make(chan error, 1)}
	go func() { o.done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := o.Reconciles(ctx); err == nil {
			return o, nil
		}
		select {
		case err := <-o.done:
			o.done <- err
			return nil, fmt.Errorf("engine operator exited (log: %s): %w", logFile, err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = o.Stop()
			return nil, fmt.Errorf("engine operator: no metrics after 30s (log: %s)", logFile)
		}
	}
}

// Stop interrupts the operator and waits for it to exit; how it exited
// does not matter to a benchmark that is over.
func (o *Operator) Stop() error {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	var exit error
	select {
	case exit = <-o.done:
	case <-time.After(10 * time.Second):
		_ = o.cmd.Process.Kill()
		exit = <-o.done
	}
	_ = exit
	return o.log.Close()
}

// PeakRSS is the operator's peak resident set so far, in bytes.
func (o *Operator) PeakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", o.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", o.cmd.Process.Pid)
}

// Reconciles is how many reconciles of ManifestSyncs the operator has
// finished, whatever their result, from its own metrics (not the API
// server's, so reading them costs the cluster nothing).
func (o *Operator) Reconciles(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.metrics, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	var n float64
	for _, m := range families["controller_runtime_reconcile_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" && l.GetValue() == "manifestsync" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
