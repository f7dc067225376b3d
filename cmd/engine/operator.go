package main

import (
	"context"
	goflag "flag"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/gitsource"
)

type operatorFlags struct {
	kubeconfig     string
	metricsAddr    string
	probeAddr      string
	leaderElect    bool
	leaderElectNS  string
	concurrency    int
	targetWorkers  int
	qps            float32
	burst          int
	zap            zap.Options
	reconcilerOpts controller.Options
}

func newOperatorCmd() *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Run the ManifestSync controller manager",
		Long: `Run the ManifestSync controller manager: it reconciles every ManifestSync
of the cluster, in-cluster or with --kubeconfig (else $KUBECONFIG or
~/.kube/config), until interrupted.

Logs are structured (JSON unless --zap-devel); they name objects, never
their data.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOperator(cmd.Context(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; default: in-cluster, $KUBECONFIG or ~/.kube/config")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint; "0" disables it`)
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", `address of the /healthz and /readyz endpoints; "0" disables them`)
	fl.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
	fl.StringVar(&f.leaderElectNS, "leader-election-namespace", "", "namespace of the leader election lease; default: the pod's")
	fl.IntVar(&f.concurrency, "concurrency", 4, "ManifestSyncs reconciled at once")
	fl.IntVar(&f.targetWorkers, "target-concurrency", 4, "targets of one ManifestSync applied at once")
	fl.Float32Var(&f.qps, "kube-api-qps", 100, "client-side limit of API requests per second")
	fl.IntVar(&f.burst, "kube-api-burst", 200, "client-side burst of API requests")
	addLimitFlags(fl, &f.reconcilerOpts.Limits)
	// Failed syncs are reported in status and events; their log lines
	// need no stack trace unless asked for.
	f.zap.StacktraceLevel = zapcore.PanicLevel
	zfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	f.zap.BindFlags(zfs)
	fl.AddGoFlagSet(zfs)
	return cmd
}

func runOperator(ctx context.Context, f *operatorFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.concurrency < 1 || f.targetWorkers < 1 {
		return usageErr("operator: --concurrency and --target-concurrency must be at least 1")
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	log := ctrl.Log.WithName("operator")

	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return usageErr("operator: %v", err)
	}
	cfg.QPS, cfg.Burst = f.qps, f.burst
	cfg.UserAgent = programName + "-operator/" + buildVersion()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "manifestsync.dev",
		LeaderElectionNamespace: f.leaderElectNS,
		// The reconciler caches ManifestSyncs and the metadata of what it
		// watches; object bodies (Secrets above all) are read on demand
		// and never cached cluster-wide.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
	})
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	f.reconcilerOpts.Concurrency = f.concurrency
	f.reconcilerOpts.TargetWorkers = f.targetWorkers
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := &controller.Reconciler{Options: f.reconcilerOpts, Sources: gitsource.New(mgr.GetAPIReader(), gitCacheDir())}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	log.Info("starting", "version", buildVersion(), "host", cfg.Host, "leaderElection", f.leaderElect, "concurrency", f.concurrency)
	if err := mgr.Start(ctx); err != nil {
		return failed(fmt.Errorf("operator: %w", err))
	}
	return nil
}

// restConfig loads the kubeconfig file when one is given, else the usual
// places: in-cluster, $KUBECONFIG, ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}
