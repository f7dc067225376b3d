package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	goflag "flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/helm/charts"
	"github.com/manifestsync/manifestsync/httpsrc"
	"github.com/manifestsync/manifestsync/oci"
	"github.com/manifestsync/manifestsync/operator/controller"
	"github.com/manifestsync/manifestsync/operator/webhook"
)

type operatorFlags struct {
	kubeconfig     string
	metricsAddr    string
	probeAddr      string
	pprofAddr      string
	webhookAddr    string
	uiAddr         string
	leaderElect    bool
	leaderElectNS  string
	shutdownGrace  time.Duration
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	concurrency    int
	targetWorkers  int
	qps            float32
	burst          int
	zap            zap.Options
	reconcilerOpts controller.Options
	evalWorkers    evalWorkerFlags
	gitCacheMax    resource.QuantityValue // --git-cache-max-size
	helmCacheMax   resource.QuantityValue // --helm-cache-max-size
	// trustedSet is set when --trusted-namespaces was given; else the
	// operator's own namespace is trusted.
	trustedSet bool
	// watchLabelSelector is --watch-label-selector: the ManifestSyncs
	// this operator caches and reconciles (manifestSyncSelector).
	watchLabelSelector string
	shards             shardFlags // --shards, --shard-id (shards.go)
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
their data.

With --webhook-bind-address, it also receives the push notifications of
Git servers (GitHub, Gitea, GitLab) at /hooks/<namespace>/<name>: a
ManifestSync with the annotation manifestsync.dev/webhook-secret naming a
Secret of its namespace (key "token") fetches its sources at once when a
call signed with that secret arrives. The receiver speaks plain HTTP: expose
it through an Ingress (or a proxy) that terminates TLS. Every replica
serves it, leader or not.

With --ui-bind-address, it also serves the web UI (docs/ui.md): every
replica, leader or not. Each visitor signs in with a bearer token of their
own (a service account's, or an OIDC token the API server accepts), which
the UI checks with a TokenReview; it then reads and acts as that user by
impersonation, never with the operator's rights, so that nobody sees or
does through it what kubectl would refuse them. That takes the operator's
rights to create tokenreviews and subjectaccessreviews and to impersonate
users, groups, service accounts, uids and user extras (the chart's
ui.enabled grants them). The UI reads ManifestSyncs from the operator's
own cache: it adds no watch. It speaks plain HTTP: expose it through an
Ingress that terminates TLS, or reach it with kubectl port-forward.

With --shards auto, every replica reconciles (docs/sharding.md): each
holds a Lease of its own (manifestsync-shard-ID, in
--leader-election-namespace or its own), and reconciles and caches only
the ManifestSyncs labelled shard.manifestsync.dev/owner=ID. The replica
holding the leader lease assigns them over the live Leases by consistent
hashing; before one moves, its old owner finishes its sync in flight and
lets go (shard.manifestsync.dev/drain). A replica renews its Lease every
--shard-retry-period (2s); one that cannot renew it for
--shard-renew-deadline (10s) stops writing and exits, before the Lease
expires (--shard-lease-duration, 15s) and its ManifestSyncs go to the
others. engine status --shards shows the replicas and their shares.

With --instance-id, the operator's field manager is manifestsync-ID and the
owner label of its objects "<namespace>.<name>_ID": operators of several
clusters writing to one shared cluster then never take over, prune or
correct each other's objects (an object of another instance is a Conflict
under policy Sync).

With --leader-elect, one replica leads (the Lease manifestsync.dev in
--leader-election-namespace) and reconciles; the others serve /readyz,
metrics and the webhook receiver, and write nothing. When the leader dies
a standby takes over within the lease duration and two retry periods (15s
to 19.4s by default); a leader that stops (SIGTERM) releases its lease at
once. A leader that cannot renew its lease within the renew deadline (an
API server outage) exits rather than risk writing beside a new leader; its
pod restarts it as a standby.

With --watch-label-selector, the operator caches, watches and reconciles
only the ManifestSyncs the selector matches, as Flux's controllers shard
by hand (docs/sharding.md): one Deployment per shard, such as
"sharding.fluxcd.io/key=shard1", and one with "!sharding.fluxcd.io/key"
for the rest. Each selector has a leader election lease of its own
(manifestsync.dev-<hash of the selector>). A ManifestSync relabelled out
of the selector is forgotten, not deleted: nothing of it is pruned, and
the shard it now matches takes it up.

On SIGTERM the syncs in flight finish their applies and status (within
--graceful-shutdown-timeout), so that no target is left half-applied;
then the operator exits.

While the API server does not answer its /readyz, the operator logs it
once (and once more when it answers again, with the outage's length),
/readyz fails and the metric manifestsync_apiserver_reachable is 0; its
watches wait and resume within a second or two of the API server
answering again.

Targets with a cluster (targets[].cluster.kubeConfigSecretRef) are synced
with that kubeconfig's credentials, each request bounded by
--remote-timeout; an unreachable cluster fails only its own targets. A
deleted ManifestSync waits at most --deletion-timeout for its objects to
be pruned. With spec.serviceAccountName, in-cluster reads and writes
(targets, object sources, the Secrets git sources' secretRef names)
impersonate that account; --require-service-account makes it mandatory,
and refuses spec.dependsOn across namespaces.

Without a service account, a ManifestSync writes with the operator's
rights through a gate, unless its namespace is trusted
(--trusted-namespaces, by default the operator's own, as Flux trusts
flux-system): into its own namespace, and into a namespace whose
annotation manifestsync.dev/allow-from lists its namespace (or "*"); no
cluster-scoped object, no Role or RoleBinding granting reads outside its
namespace, no take-over of an object of a ManifestSync of a namespace it
may not write. A refused target applies nothing (TargetNotAllowed). With
--default-service-account, such a ManifestSync of an untrusted namespace
runs as that account of its namespace instead, as with
spec.serviceAccountName.

A ManifestSync that runs code of its user (a Starlark or CUE transform,
CUE schemas or policies from a source, a kustomize source) is evaluated in
an evaluation worker process (--eval-workers of them at most, each bounded
by --eval-memory-limit and --eval-timeout), started with the first such
evaluation; another starts only for an evaluation that waited 100ms for
a busy one, and one idle for --eval-idle-timeout stops. One without (its inputs passed through, the targets' patches,
builtin schemas) runs none, and is evaluated in the operator's process.

The Go runtime honours GOMEMLIMIT and GOGC. Without GOMEMLIMIT, under a
cgroup memory limit (a container's), the operator's soft memory limit is
nine tenths of what the evaluation workers leave of it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.trustedSet = cmd.Flags().Changed("trusted-namespaces")
			return runOperator(cmd.Context(), &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; default: in-cluster, $KUBECONFIG or ~/.kube/config")
	fl.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", `address of the Prometheus metrics endpoint; "0" disables it`)
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", `address of the /healthz and /readyz endpoints; "0" disables them`)
	fl.StringVar(&f.pprofAddr, "pprof-bind-address", "0", `address of the Go profiler's /debug/pprof/ endpoints, such as "127.0.0.1:6060"; "0" disables them (profiles show what the operator holds: do not expose them)`)
	fl.StringVar(&f.webhookAddr, "webhook-bind-address", "0", `address of the Git webhook receiver (plain HTTP), such as ":9443"; "0" disables it`)
	fl.StringVar(&f.uiAddr, "ui-bind-address", "0", `address of the web UI (plain HTTP; each visitor signs in with a token and is impersonated), such as ":8090"; "0" disables it`)
	fl.StringVar(&f.reconcilerOpts.InstanceID, "instance-id", "", "identity of this operator among several writing to the same clusters; part of its field manager and owner label")
	fl.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader, so that only one of several replicas reconciles")
	fl.StringVar(&f.leaderElectNS, "leader-election-namespace", "", "namespace of the leader election lease; default: the pod's")
	fl.DurationVar(&f.leaseDuration, "leader-election-lease-duration", 15*time.Second,
		"how long standbys wait, after the leader's last renewal, before they take the lease over")
	fl.DurationVar(&f.renewDeadline, "leader-election-renew-deadline", 10*time.Second,
		"how long the leader tries to renew its lease (the API server may be unreachable) before it gives up and exits, so that it never writes beside a new leader")
	fl.DurationVar(&f.retryPeriod, "leader-election-retry-period", time.Second,
		"how often the leader renews its lease and standbys try to take it (each wait jittered up to 2.2x); a killed leader is replaced within the lease duration plus two of these")
	fl.DurationVar(&f.shutdownGrace, "graceful-shutdown-timeout", 25*time.Second,
		"how long the operator waits, once told to stop (SIGTERM), for the syncs in flight to finish their applies and status; keep it below the pod's terminationGracePeriodSeconds (30s by default)")
	f.shards.add(fl) // --shards, --shard-id, --shard-lease-duration, ... (shards.go)
	fl.StringVar(&f.watchLabelSelector, "watch-label-selector", "",
		`reconcile only the ManifestSyncs this label selector matches (as Flux's controllers shard by hand: "sharding.fluxcd.io/key=shard1" in one Deployment, "!sharding.fluxcd.io/key" in the one that takes the rest); default: every ManifestSync`)
	fl.IntVar(&f.concurrency, "concurrency", 4, "ManifestSyncs reconciled at once")
	fl.IntVar(&f.targetWorkers, "target-concurrency", 8, "targets of one ManifestSync applied at once")
	fl.Float32Var(&f.qps, "kube-api-qps", 0, "client-side limit of API requests per second, to each cluster; 0 (or less) sets none, leaving the API server's Priority and Fairness to protect it")
	fl.IntVar(&f.burst, "kube-api-burst", 0, "client-side burst of API requests, with --kube-api-qps; 0 is twice --kube-api-qps")
	fl.DurationVar(&f.reconcilerOpts.RemoteTimeout, "remote-timeout", 10*time.Second, "timeout of every request to a remote cluster (sources[].cluster, targets[].cluster)")
	fl.BoolVar(&f.reconcilerOpts.AllowKubeconfigExec, "allow-kubeconfig-exec", false,
		"let the kubeconfigs of remote clusters (sources[].cluster, targets[].cluster) get credentials from a plugin (users[].user.exec, auth-provider); off, they are refused: the plugin is a command named by whoever may write the Secret, run in the operator's pod with its rights")
	fl.DurationVar(&f.reconcilerOpts.DeletionTimeout, "deletion-timeout", 5*time.Minute,
		"how long a deleted ManifestSync waits for its objects to be pruned (a remote cluster may be unreachable) before its finalizer is removed anyway, with a Warning event naming what was left")
	fl.BoolVar(&f.reconcilerOpts.RequireServiceAccount, "require-service-account", false,
		"fail every ManifestSync without spec.serviceAccountName, so that all in-cluster writes impersonate a tenant's service account; refuse spec.dependsOn across namespaces")
	fl.StringSliceVar(&f.reconcilerOpts.TrustedNamespaces, "trusted-namespaces", nil,
		`namespaces (comma-separated) whose ManifestSyncs write anywhere the operator can, as a platform team's; the others write through the gate (their own namespace, and those whose annotation manifestsync.dev/allow-from names theirs); "*" trusts every namespace (a cluster of one team); default: the operator's own namespace ($POD_NAMESPACE, or its service account's)`)
	fl.StringVar(&f.reconcilerOpts.DefaultServiceAccount, "default-service-account", "",
		"service account (of its own namespace) that a ManifestSync of a namespace not trusted runs as when it names none, so that the API server decides its reads and writes by impersonation; default: none (the gate decides)")
	fl.IntVar(&f.reconcilerOpts.WriteWarLimit, "write-war-limit", 5,
		"how many times one object may be rewritten to the same desired state within --write-war-window; one write more is a write war, refused and reported as a Conflict")
	fl.DurationVar(&f.reconcilerOpts.WriteWarWindow, "write-war-window", time.Minute, "the window of --write-war-limit")
	f.gitCacheMax.Quantity = resource.MustParse("128Mi")
	fl.Var(&f.gitCacheMax, "git-cache-max-size", "memory the git cache may hold (repositories and snapshots, least recently used dropped first), and the most one fetch may bring (a quantity: 64Mi, 1Gi)")
	f.helmCacheMax.Quantity = resource.MustParse("128Mi")
	fl.Var(&f.helmCacheMax, "helm-cache-max-size", "memory the helm cache may hold (chart archives by digest with their files, and repository indexes; least recently used dropped first) (a quantity: 64Mi, 1Gi)")
	addLimitFlags(fl, &f.reconcilerOpts.Limits)
	addEvalWorkerFlags(fl, &f.evalWorkers)
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
	if err := controller.ValidateInstanceID(f.reconcilerOpts.InstanceID); err != nil {
		return usageErr("operator: --instance-id: %v", err)
	}
	if err := checkUIBindAddress(f.uiAddr); err != nil {
		return err
	}
	msSelector, err := manifestSyncSelector(f)
	if err != nil {
		return err
	}
	shards, err := newSharding(f)
	if err != nil {
		return err
	}
	if !f.trustedSet {
		f.reconcilerOpts.TrustedNamespaces = ownNamespace(os.Getenv, os.ReadFile)
	}
	evaluator, stopWorkers, err := f.evalWorkers.evaluator()
	if err != nil {
		return err
	}
	defer stopWorkers()
	f.reconcilerOpts.Evaluator = evaluator
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	log := ctrl.Log.WithName("operator")
	if os.Getenv("GOMEMLIMIT") == "" {
		if cgroup, ok := cgroupMemoryLimit(os.DirFS("/")); ok {
			if soft := softMemoryLimit(cgroup, f.evalWorkers.budget()); soft > 0 {
				debug.SetMemoryLimit(soft)
				log.Info("soft memory limit from the cgroup's", "cgroupLimit", cgroup, "goMemLimit", soft)
			}
		}
	}

	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return usageErr("operator: %v", err)
	}
	cfg.QPS, cfg.Burst = clientLimits(f.qps, f.burst)
	cfg.UserAgent = programName + "-operator/" + buildVersion()

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	// While the API server does not answer, the operator is not ready and
	// its caches' watches wait for it, so that they resume at once when it
	// answers again (see controller.APIServerProbe).
	apiServer, err := controller.NewAPIServerProbe(cfg)
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := waitForAPI(ctx, cfg, log); err != nil {
		return failed(fmt.Errorf("operator: %w", err))
	}
	f.reconcilerOpts.APIServer = apiServer
	if shards != nil {
		if err := shards.guard(cfg, scheme); err != nil {
			return fmt.Errorf("operator: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress: f.probeAddr,
		PprofBindAddress:       f.pprofAddr,
		// With --shards auto every replica reconciles; only its sharder
		// is elected (shards.go).
		LeaderElection:          f.leaderElect && shards == nil,
		LeaderElectionID:        leaderElectionID(msSelector),
		LeaderElectionNamespace: f.leaderElectNS,
		// A leader that stops gives up its lease at once, so that a
		// standby takes over without waiting for it to expire.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &f.leaseDuration,
		RenewDeadline:                 &f.renewDeadline,
		RetryPeriod:                   &f.retryPeriod,
		GracefulShutdownTimeout:       &f.shutdownGrace,
		// The reconciler caches ManifestSyncs and the metadata of what it
		// watches; object bodies (Secrets above all) are read on demand
		// and never cached cluster-wide.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), NewInformer: apiServer.NewInformer,
			ByObject: map[client.Object]cache.ByObject{&v1alpha1.ManifestSync{}: {Label: shards.selector(msSelector)}}},
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
	if err := apiServer.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	f.reconcilerOpts.Concurrency = f.concurrency
	// Syncs in flight get the shutdown timeout less a margin for the
	// manager's own stop.
	f.reconcilerOpts.ShutdownGrace = max(f.shutdownGrace-5*time.Second, f.shutdownGrace*4/5)
	f.reconcilerOpts.TargetWorkers = f.targetWorkers
	gitCache := controller.NewGitCache(git.Options{CacheDir: gitCacheDir(), MaxCacheBytes: f.gitCacheMax.Value()})
	if err := mgr.Add(gitCache.Sweeper(mgr.GetClient(), controller.GitSweepPeriod)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	helmCache := controller.NewHelmCache(charts.Options{MaxCacheBytes: f.helmCacheMax.Value()})
	if err := mgr.Add(helmCache.Sweeper(mgr.GetClient(), controller.GitSweepPeriod)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	// The last artifact and archive of each oci and http source, 128 MiB
	// each at most, for unchanged polls.
	ociCache := controller.NewOCICache(oci.CacheOptions{})
	ociCache.Verify = oci.CosignVerifier(ociCache.Client) // verify: {provider: cosign}
	if err := mgr.Add(controller.OCISweeper(ociCache, mgr.GetClient(), controller.GitSweepPeriod)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	httpCache := controller.NewHTTPCache(httpsrc.CacheOptions{})
	if err := mgr.Add(controller.HTTPSweeper(httpCache, mgr.GetClient(), controller.GitSweepPeriod)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	var wrap func(reconcile.Reconciler) reconcile.Reconciler
	if shards != nil {
		if wrap, err = shards.setup(mgr, cfg, scheme, f, msSelector, leaderElectionID(msSelector)); err != nil {
			return fmt.Errorf("operator: %w", err)
		}
	}
	r := &controller.Reconciler{Options: f.reconcilerOpts, Git: gitCache.Provider, Helm: helmCache.Provider, OCI: ociCache.Provider, HTTP: httpCache.Provider}
	if err := r.SetupWithManagerWrapped(ctx, mgr, wrap); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if f.webhookAddr != "" && f.webhookAddr != "0" {
		secrets, err := webhook.NewSecretCache(mgr, apiServer.NewInformer)
		if err != nil {
			return fmt.Errorf("operator: %w", err)
		}
		rc := &webhook.Receiver{Client: mgr.GetClient(), Secrets: secrets, Log: ctrl.Log.WithName("webhook")}
		if shards != nil { // a call reaches any replica; the manager's cache holds its share
			if rc.Syncs, err = webhook.NewSyncCache(mgr, apiServer.NewInformer, msSelector); err != nil {
				return fmt.Errorf("operator: %w", err)
			}
		}
		if err := mgr.Add(webhook.NewServer(f.webhookAddr, rc)); err != nil {
			return fmt.Errorf("operator: %w", err)
		}
	}
	var uiSelector labels.Selector // the manager's cache, unless it holds a share
	if shards != nil {
		uiSelector = msSelector
	}
	stopUI, err := addOperatorUI(mgr, f.uiAddr, f.reconcilerOpts.InstanceID, uiSelector)
	if err != nil {
		return err
	}
	defer stopUI()
	log.Info("starting", "version", buildVersion(), "instance", f.reconcilerOpts.InstanceID, "webhook", f.webhookAddr, "ui", f.uiAddr, "host", cfg.Host, "leaderElection", f.leaderElect, "concurrency", f.concurrency)
	if shards == nil {
		if err := mgr.Start(ctx); err != nil {
			return failed(fmt.Errorf("operator: %w", err))
		}
		return nil
	}
	mctx, stopMgr := context.WithCancel(ctx)
	defer stopMgr()
	shards.start(mctx, stopMgr)
	err = mgr.Start(mctx)
	if ferr := shards.finish(); ferr != nil {
		return failed(ferr)
	}
	if err != nil {
		return failed(fmt.Errorf("operator: %w", err))
	}
	return nil
}

// manifestSyncSelector is the label selector of the ManifestSyncs this
// operator caches, and so watches and reconciles (--watch-label-selector,
// Flux's flag for sharding by hand): every ManifestSync without the flag.
// Only ManifestSyncs are filtered, as Flux filters only its own kinds: the
// watches the reconciler derives from them (sources, targets' namespaces,
// managed objects) follow from the ManifestSyncs in the cache. A
// ManifestSync relabelled out of the selector leaves the cache as if it
// were deleted, without its deletion: the operator forgets it and prunes
// nothing, and the operator whose selector it now matches takes it up.
func manifestSyncSelector(f *operatorFlags) (labels.Selector, error) {
	if strings.TrimSpace(f.watchLabelSelector) == "" {
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(f.watchLabelSelector)
	if err != nil {
		return nil, usageErr("operator: --watch-label-selector %q: %v", f.watchLabelSelector, err)
	}
	return sel, nil
}

// leaderElectionID is the name of the leader election lease: one per
// --watch-label-selector, as Flux's sharded controllers have, so that the
// Deployment of each shard elects a leader of its own in one namespace
// (a shared lease would let one shard's leader stop all the others).
func leaderElectionID(sel labels.Selector) string {
	if sel.Empty() {
		return "manifestsync.dev"
	}
	sum := sha256.Sum256([]byte(sel.String())) // canonical: the requirements sorted
	return "manifestsync.dev-" + hex.EncodeToString(sum[:5])
}

// waitForAPI waits until the API server serves the ManifestSync API,
// trying every second: an operator started (or restarted) during an API
// server outage, or before its CRD is served, waits for it instead of
// exiting into a crash loop's growing backoff. It says so once.
func waitForAPI(ctx context.Context, cfg *rest.Config, log logr.Logger) error {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	gv := v1alpha1.GroupVersion.String()
	var since time.Time
	for {
		_, err := dc.ServerResourcesForGroupVersion(gv)
		if err == nil {
			if !since.IsZero() {
				log.Info("API server serves "+gv+"; starting", "waited", time.Since(since).Round(time.Millisecond).String())
			}
			return nil
		}
		if since.IsZero() {
			since = time.Now()
			log.Error(err, "waiting for the API server to serve "+gv, "host", cfg.Host)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the API server to serve %s: %w", gv, err)
		case <-time.After(time.Second):
		}
	}
}

// serviceAccountNamespaceFile holds the namespace of a pod's service
// account.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ownNamespace is the operator's namespace, as the default of
// --trusted-namespaces: $POD_NAMESPACE, else its service account's; none
// outside a pod (no namespace is trusted then).
func ownNamespace(getenv func(string) string, readFile func(string) ([]byte, error)) []string {
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" {
		return []string{ns}
	}
	if b, err := readFile(serviceAccountNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
		return []string{strings.TrimSpace(string(b))}
	}
	return nil
}

// clientLimits are the rest.Config QPS and Burst of the flags: no
// client-side limit unless --kube-api-qps sets a positive one (client-go
// reads a QPS of 0 as its default of 5 requests per second, and a negative
// one as none).
// Requests in flight are bounded by --concurrency and --target-concurrency
// already, and the API server's Priority and Fairness protects it.
func clientLimits(qps float32, burst int) (float32, int) {
	if qps <= 0 {
		return -1, 0
	}
	if burst <= 0 {
		burst = max(1, int(2*qps))
	}
	return qps, burst
}

// restConfig loads the kubeconfig file when one is given, else the usual
// places: in-cluster, $KUBECONFIG, ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}
