package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/ui"
)

// defaultUIAddr is where engine ui listens unless --addr says otherwise:
// loopback only, as the UI acts with the user's own credentials.
const defaultUIAddr = "127.0.0.1:8090"

type uiFlags struct {
	cluster clusterFlags
	addr    string
	open    bool
}

func newUICmd() *cobra.Command {
	var f uiFlags
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web UI on this machine, as the kubeconfig's user",
		Long: `Serve the web UI of ManifestSync on --addr (127.0.0.1:8090 by default; port 0
picks a free one) until interrupted: every ManifestSync you may list, with
its readiness, health, revision and targets; one ManifestSync's inputs,
conditions and the tree of the objects of each target (with the objects
the cluster made for them: ReplicaSets, Pods, Jobs), their health, drift
and live YAML; what syncing it would change now (the diff engine diff
shows); its history and the files changed between two entries; its events.
Sync now, suspend, resume, rollback and undo are buttons, each confirmed,
each recorded as an event naming you. Pages update by themselves within a
second of a change in the cluster. See docs/ui.md.

Every read and every action is made with the credentials of the kubeconfig
(--kubeconfig, else $KUBECONFIG, else ~/.kube/config, in its current
context or --context): the UI shows and does nothing kubectl would refuse
you. For that reason it listens on loopback by default and refuses
requests that name another host (a DNS rebinding page's). An --addr that
is not loopback (0.0.0.0:8090) is allowed, with a warning: anyone who
reaches it acts as the kubeconfig's user. In a cluster, serve the UI from
the operator instead (engine operator --ui-bind-address), where each
visitor signs in with a token of their own.

It prints "ui: serving on http://ADDR/" once it listens; --open starts the
browser on that address too (xdg-open, open: a failure to start it is
reported, not fatal).

Exit status: 0 stopped (SIGINT or SIGTERM), 1 the server failed while
serving, 2 error (bad flags, no kubeconfig, the address in use).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUI(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG, else ~/.kube/config")
	fl.StringVar(&f.cluster.context, "context", "", "kubeconfig context; default: the current one")
	fl.StringVar(&f.addr, "addr", defaultUIAddr, "address to listen on, HOST:PORT; port 0 picks a free one. Anyone who reaches it acts as the kubeconfig's user: keep it on loopback")
	fl.BoolVar(&f.open, "open", false, "open the UI in the browser once it listens")
	return cmd
}

func runUI(ctx context.Context, stdout, stderr io.Writer, f *uiFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return usageErr("ui: --addr %q: want HOST:PORT, such as %s: %w", f.addr, defaultUIAddr, err)
	}
	// No --request-timeout: it would end the UI's watches, which last.
	cfg, namespace, err := f.cluster.restConfig("ui")
	if err != nil {
		return err
	}
	if !loopbackHost(host) {
		warning(stderr, "ui: --addr %s is not a loopback address: anyone who reaches it acts as the kubeconfig's user on %s", f.addr, cfg.Host)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Listening first: a port in use fails at once, before an
	// evaluation worker is started.
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return usageErr("ui: %w", err)
	}
	defer ln.Close()
	log := uiLogger(stderr)
	ctrllog.SetLogger(log)

	evaluator, stopEvaluator, err := newUIEvaluator("ui", cfg)
	if err != nil {
		return err
	}
	defer stopEvaluator()
	srv, err := ui.New(ui.Options{Mode: ui.ModeLocal, Config: cfg, Evaluator: evaluator, Namespace: namespace, Log: log})
	if err != nil {
		return usageErr("ui: %w", err)
	}

	url := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(stdout, "ui: serving on %s\n", url)
	if f.open {
		openBrowser(ctx, stderr, browserURL(ln.Addr()))
	}

	// The watches and the HTTP server run together; either's end (an
	// error, or the interrupt) stops both.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watches := make(chan error, 1)
	go func() { watches <- srv.Start(ctx); cancel() }()
	served := ui.Serve(ctx, ln, srv, logr.Discard())
	cancel()
	werr := <-watches
	if err := errors.Join(served, werr); err != nil {
		return failed(fmt.Errorf("ui: %w", err))
	}
	return nil
}

// loopbackHost reports whether host (of HOST:PORT) is a loopback name or
// address; "" (every interface) is not.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// browserURL is the address a browser on this machine opens: the listener's,
// with a wildcard host (0.0.0.0, ::) replaced by loopback.
func browserURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String() + "/"
	}
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(tcp.Port)) + "/"
}

// openBrowser starts the desktop's browser on url, best effort: a failure
// is reported on stderr, and the UI serves on.
func openBrowser(ctx context.Context, stderr io.Writer, url string) {
	name, args := "xdg-open", []string{url}
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	}
	cmd := exec.CommandContext(ctx, name, args...)
	// The opener's own chatter is not the UI's.
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		warning(stderr, "ui: --open: starting the browser with %s: %v; open %s yourself", name, err, url)
		return
	}
	go func() {
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			warning(stderr, "ui: --open: %s %s: %v; open %s yourself", name, url, err, url)
		}
	}()
}

// uiLogger writes the UI's log (requests that failed, watches that
// stopped) to stderr, one line each, no stack traces.
func uiLogger(stderr io.Writer) logr.Logger {
	return ctrlzap.New(ctrlzap.WriteTo(stderr), ctrlzap.Level(zapcore.InfoLevel),
		ctrlzap.ConsoleEncoder(), ctrlzap.StacktraceLevel(zapcore.PanicLevel))
}

// addOperatorUI adds the web UI to the operator's manager, when
// --ui-bind-address asks for it: in cluster mode (each visitor's token,
// checked with a TokenReview, is impersonated), on the manager's rest
// config, hooked into the manager's cache (no watch of its own), served
// by every replica, leader or not. A replica of --shards auto (sharded
// not nil: the operator's --watch-label-selector) caches its share only,
// and every replica's UI shows every ManifestSync: its UI watches those
// sharded selects itself. It returns how to stop the UI's evaluator, once
// the manager has stopped.
func addOperatorUI(mgr manager.Manager, addr, instanceID string, sharded labels.Selector) (func(), error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	if err := checkUIBindAddress(addr); err != nil {
		return nil, err
	}
	evaluator, stopEvaluator, err := newUIEvaluator("operator", mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("ui")
	var own cache.Cache = mgr.GetCache()
	if sharded != nil {
		own = nil
	}
	srv, err := ui.New(ui.Options{
		Mode:       ui.ModeCluster,
		Config:     mgr.GetConfig(),
		Cache:      own,
		Selector:   sharded,
		Evaluator:  evaluator,
		InstanceID: instanceID,
		Log:        log,
	})
	if err != nil {
		stopEvaluator()
		return nil, fmt.Errorf("operator: ui: %w", err)
	}
	if err := mgr.Add(srv); err != nil {
		stopEvaluator()
		return nil, fmt.Errorf("operator: ui: %w", err)
	}
	if err := mgr.Add(&uiListener{addr: addr, handler: srv, log: log}); err != nil {
		stopEvaluator()
		return nil, fmt.Errorf("operator: ui: %w", err)
	}
	return stopEvaluator, nil
}

// checkUIBindAddress refuses an --ui-bind-address that is neither "0"
// (off) nor [HOST]:PORT, before the operator waits for its API server.
func checkUIBindAddress(addr string) error {
	if addr == "" || addr == "0" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usageErr("operator: --ui-bind-address %q: want [HOST]:PORT, such as :8090, or 0 (off): %w", addr, err)
	}
	return nil
}

// uiListener serves the UI on its address while the manager runs, on
// every replica (a standby's visitors see and act as well: their actions
// are their own writes, not the operator's).
type uiListener struct {
	addr    string
	handler http.Handler
	log     logr.Logger
}

func (l *uiListener) Start(ctx context.Context) error {
	return ui.ListenAndServe(ctx, l.addr, l.handler, l.log)
}

func (*uiListener) NeedLeaderElection() bool { return false }
