package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// The operator sets no client-side limit unless --kube-api-qps asks for
// one: client-go would read a QPS of 0 as 5 requests per second.
func TestClientLimits(t *testing.T) {
	for _, c := range []struct {
		qps       float32
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{0, 0, -1, 0},
		{0, 300, -1, 0},
		{-1, 0, -1, 0},
		{50, 0, 50, 100},
		{50, 80, 50, 80},
		{0.2, 0, 0.2, 1},
	} {
		if qps, burst := clientLimits(c.qps, c.burst); qps != c.wantQPS || burst != c.wantBurst {
			t.Errorf("clientLimits(%v, %d) = %v, %d; want %v, %d", c.qps, c.burst, qps, burst, c.wantQPS, c.wantBurst)
		}
	}
}

// engine operator serves its API server probe: while the API server is
// down its /readyz fails and manifestsync_apiserver_reachable is 0; both
// recover when the API server is back. (operator/e2e's TestAPIServerOutage
// checks what the operator's watches do meanwhile.)
func TestOperatorAPIServerProbe(t *testing.T) {
	env := ownEnv(t)
	op := startEngineOperator(t, env)
	t.Cleanup(func() {
		logs := op.stop(t)
		// The outage is logged once, when it begins and when it ends.
		for _, msg := range []string{`"msg":"API server unreachable`, `"msg":"API server reachable again`} {
			if n := strings.Count(logs, msg); n != 1 {
				t.Errorf("%d log lines with %s, want 1:\n%s", n, msg, logs)
			}
		}
	})
	probes, metrics := op.probes, op.metrics

	probe := func(code int, gauge string) func() error {
		return func() error {
			res, err := http.Get("http://" + probes + "/readyz/apiserver")
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != code {
				return fmt.Errorf("/readyz/apiserver: %d, want %d", res.StatusCode, code)
			}
			res, err = http.Get("http://" + metrics + "/metrics")
			if err != nil {
				return err
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				return err
			}
			if want := "\nmanifestsync_apiserver_reachable " + gauge + "\n"; !strings.Contains(string(body), want) {
				return fmt.Errorf("/metrics has no %q", strings.TrimSpace(want))
			}
			return nil
		}
	}
	testenv.Eventually(t, time.Minute, probe(http.StatusOK, "1"))
	if err := env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, probe(http.StatusInternalServerError, "0"))
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, probe(http.StatusOK, "1"))
}

// An operator started while the API server is down waits for it, and
// starts when it answers, instead of exiting into a crash loop.
func TestOperatorStartsDuringOutage(t *testing.T) {
	env := ownEnv(t)
	if err := env.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	op := startEngineOperator(t, env)
	select {
	case err := <-op.exited:
		op.stopped = true
		t.Fatalf("the operator exited while the API server was down: %v\n%s", err, op.logs.String())
	case <-time.After(3 * time.Second):
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		res, err := http.Get("http://" + op.probes + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %d", res.StatusCode)
		}
		return nil
	})
	logs := op.stop(t)
	for _, msg := range []string{`"msg":"waiting for the API server to serve manifestsync.dev/v1alpha1`, `"msg":"API server serves manifestsync.dev/v1alpha1; starting`} {
		if n := strings.Count(logs, msg); n != 1 {
			t.Errorf("%d log lines with %s, want 1:\n%s", n, msg, logs)
		}
	}
}

// ownEnv starts a control plane of the test's own, which it may kill.
func ownEnv(t *testing.T, opts ...testenv.Option) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped under -short")
	}
	env, err := testenv.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// engineOperator is `engine operator` running in a process of its own
// (controller-runtime's globals, controller names and metrics, are the
// test process's), against env.
type engineOperator struct {
	cmd             *exec.Cmd
	logs            *gittest.Buffer
	metrics, probes string
	exited          chan error // Wait's
	stopped         bool
}

func startEngineOperator(t *testing.T, env *testenv.Env) *engineOperator {
	t.Helper()
	return startEngineOperatorAs(t, env, "operator")
}

// startEngineOperatorAs starts the operator as its own user of the API
// server (so that the audit log tells its requests from another
// operator's), with args added to its command line.
func startEngineOperatorAs(t *testing.T, env *testenv.Env, user string, args ...string) *engineOperator {
	t.Helper()
	kc, err := env.Kubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	engine, err := exec.LookPath("engine") // testscript.Main's
	if err != nil {
		t.Fatal(err)
	}
	op := &engineOperator{logs: &gittest.Buffer{}, metrics: testenv.FreeAddr(t), probes: testenv.FreeAddr(t)}
	op.cmd = exec.Command(engine, "operator", "--kubeconfig", kubeconfig, "--metrics-bind-address", op.metrics,
		"--health-probe-bind-address", op.probes, "--eval-in-process")
	op.cmd.Args = append(op.cmd.Args, args...)
	op.cmd.Stdout, op.cmd.Stderr = op.logs, op.logs
	if err := op.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	op.exited = make(chan error, 1)
	go func() { op.exited <- op.cmd.Wait() }()
	t.Cleanup(func() { op.stop(t) })
	return op
}

// kill ends the operator with SIGKILL, as the loss of its node would, and
// waits until it is gone.
func (op *engineOperator) kill(t *testing.T) {
	t.Helper()
	if op.stopped {
		return
	}
	op.stopped = true
	if err := op.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-op.exited
}

// stop ends the operator with SIGTERM, as a kubelet does, and returns its
// logs; it must exit cleanly.
func (op *engineOperator) stop(t *testing.T) string {
	if !op.stopped {
		op.stopped = true
		_ = op.cmd.Process.Signal(syscall.SIGTERM)
		if err := <-op.exited; err != nil {
			t.Errorf("engine operator: %v\n%s", err, op.logs.String())
		}
	}
	return op.logs.String()
}
