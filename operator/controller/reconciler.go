package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/plural"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// Options tune the reconciler. The zero value is usable.
type Options struct {
	// Concurrency is how many ManifestSyncs are reconciled at once;
	// default 4.
	Concurrency int
	// TargetWorkers is how many targets of one ManifestSync are applied at
	// once; default 8.
	TargetWorkers int
	// Limits bound every transform; zero fields take the engine's defaults.
	Limits lstar.Limits
	// Evaluator runs the evaluations of ManifestSyncs that run code of
	// the user's (a transform, schemas from a source, kustomize) or read
	// git sources (whose parsing costs many times their size); nil
	// evaluates them in this process. The others are always evaluated in
	// this process (see evaluatorFor).
	Evaluator Evaluator
	// RetryMin and RetryMax bound the exponential backoff after a failed
	// sync; default 1s and 5m.
	RetryMin, RetryMax time.Duration
	// TransientRetryMax bounds the backoff instead of RetryMax after a
	// failure that ends by itself (a source or a cluster unreachable, an
	// apply that failed), so that a sync converges within seconds of the
	// outage's end; default 5s.
	TransientRetryMax time.Duration
	// InstanceID, when set, tells this operator's objects and fields from
	// those of other operators writing to the same clusters (see
	// labels.go); see ValidateInstanceID for what it may be.
	InstanceID string
	// RemoteTimeout bounds every request to a remote cluster, so that an
	// unreachable one fails its targets without stalling the others;
	// default 10s.
	RemoteTimeout time.Duration
	// AllowKubeconfigExec lets the kubeconfigs of remote clusters (of
	// sources and targets) get their credentials from a plugin
	// (users[].user.exec, auth-provider). Off, such a kubeconfig is
	// refused: the plugin is a command named by whoever may write the
	// Secret, run on the operator's machine with the operator's rights.
	AllowKubeconfigExec bool
	// DeletionTimeout is how long a deleted ManifestSync waits for its
	// objects to be pruned or orphaned (a remote cluster may be
	// unreachable) before its finalizer is removed anyway, with a Warning
	// event naming what was left behind; default 5m.
	DeletionTimeout time.Duration
	// TrustedNamespaces are the namespaces whose ManifestSyncs write
	// anywhere the operator can, as a platform team's ("*": every
	// namespace, for a cluster of one team). The ManifestSyncs of the
	// others, without a service account, write through the write gate
	// (see writegate.go): into their own namespace and the namespaces
	// whose AllowFromAnnotation names theirs, no cluster-scoped object,
	// no RBAC granting reads elsewhere. Nil trusts no namespace: `engine
	// operator` sets its own namespace by default, as Flux trusts
	// flux-system.
	TrustedNamespaces []string
	// DefaultServiceAccount, when set, is the service account (of its own
	// namespace) that a ManifestSync of a namespace that is not trusted
	// runs as when it names none, as Flux's --default-service-account:
	// the API server then decides every read and write by impersonation.
	DefaultServiceAccount string
	// RequireServiceAccount fails every ManifestSync without
	// spec.serviceAccountName, so that no tenant writes with the
	// operator's own permissions (see tenancy.go), and refuses
	// dependencies on ManifestSyncs of other namespaces (see depends.go).
	RequireServiceAccount bool
	// WriteWarLimit and WriteWarWindow bound how often one object is
	// rewritten to the same desired state: one write more than
	// WriteWarLimit within WriteWarWindow is a write war, refused and
	// reported as a Conflict (see writewar.go); default 5 and 1m.
	WriteWarLimit  int
	WriteWarWindow time.Duration
	// ShutdownGrace is how long a reconcile in flight when the operator
	// is asked to stop may go on, so that it finishes its applies and
	// records them in status instead of leaving a target half-applied;
	// default 20s. The manager's graceful shutdown timeout must be longer.
	ShutdownGrace time.Duration
	// APIServer, when set, holds the list and watch calls of the caches
	// the reconciler makes while the API server does not answer, so that
	// they resume at once when it does (see APIServerProbe); the manager's
	// cache should take its NewInformer too.
	APIServer *APIServerProbe
	// ShardID is the ID of this replica of `engine operator --shards
	// auto` (operator/shard), "" without sharding. Every object it applies
	// carries ShardLabel with it, and its cache of managed objects holds
	// only those carrying its own: memory per replica falls with the
	// number of replicas. An object another replica labelled (its
	// ManifestSync moved here) is read from the API server until this
	// replica applies it, which its first sync does (shard.go).
	ShardID string
	// RemoteTransport, when set, wraps the transport of every client of
	// a remote cluster (targets[].cluster, sources[].cluster), outermost,
	// as rest.Config.Wrap does: a replica of --shards auto gives its
	// Member's Guard, so that once its fence has fallen no write leaves
	// for any cluster, not only its own.
	RemoteTransport func(http.RoundTripper) http.RoundTripper
	// InventoryGzipThreshold is the size of status.inventory's JSON above
	// which the inventory is written gzipped (status.inventoryGzip), so
	// that the status of a large fan-out fits in the API server's request
	// limit; default 256 KiB.
	InventoryGzipThreshold int
}

func (o Options) transientRetryMax() time.Duration {
	return orDefault(o.TransientRetryMax, 5*time.Second)
}

func (o Options) remoteTimeout() time.Duration {
	return orDefault(o.RemoteTimeout, 10*time.Second)
}

func (o Options) deletionTimeout() time.Duration {
	return orDefault(o.DeletionTimeout, 5*time.Minute)
}

func (o Options) writeGuard() *writeGuard {
	return newWriteGuard(orDefault(o.WriteWarLimit, 5), orDefault(o.WriteWarWindow, time.Minute))
}

func (o Options) shutdownGrace() time.Duration {
	return orDefault(o.ShutdownGrace, 20*time.Second)
}

func (o Options) inventoryGzipThreshold() int { return orDefault(o.InventoryGzipThreshold, 256<<10) }
func (o Options) concurrency() int            { return orDefault(o.Concurrency, 4) }
func (o Options) targetWorkers() int          { return orDefault(o.TargetWorkers, 8) }

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// defaultInterval is spec.interval when the API server did not default it.
const defaultInterval = 10 * time.Minute

// Reconciler reconciles ManifestSyncs. SetupWithManager fills in the
// fields left nil from the manager.
type Reconciler struct {
	// Client writes, and reads ManifestSyncs and metadata from the cache.
	Client client.Client
	// APIReader reads from the API server: object sources, and target
	// objects before they are applied.
	APIReader client.Reader
	// Mapper tells namespaced kinds from cluster-scoped ones.
	Mapper apimeta.RESTMapper
	// Recorder records events; nil records none.
	Recorder recorder.EventRecorder
	// Git makes the git provider of each reconcile; nil fails git
	// sources.
	Git GitProvider
	// Helm makes the helm provider of each reconcile; nil fails helm
	// sources.
	Helm HelmProvider
	// OCI makes the oci provider of each reconcile; nil fails oci
	// sources.
	OCI OCIProvider
	// HTTP makes the http provider of each reconcile; nil fails http
	// sources.
	HTTP    HTTPProvider
	Options Options

	managed  client.Reader // the metadata cache of owned objects
	watches  *watches
	states   states
	remotes  *remotes        // a client per remote cluster
	accounts *accounts       // a client per impersonated service account
	sets     *objectSets     // discovery and label-selected caches for object sets
	deps     *dependencyView // under sharding: every ManifestSync's readiness, once needed
	guard    *writeGuard
	caps     capabilityCache // what charts see of each cluster
}

// The permissions of the reconciler's own kinds. Target objects can be of
// any kind, so what it may write there is granted per installation.
//
// +kubebuilder:rbac:groups=manifestsync.dev,resources=manifestsyncs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=manifestsync.dev,resources=manifestsyncs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=manifestsync.dev,resources=manifestsyncs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch;update

// Reconcile is the controller's entry point: finalize a deleted
// ManifestSync, or sync it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx, cancel := finishInFlight(ctx, r.Options.shutdownGrace())
	defer cancel()
	st := r.states.get(req.NamespacedName)
	st.mu.Lock()
	defer st.mu.Unlock()

	ms := &v1alpha1.ManifestSync{}
	if err := r.Client.Get(ctx, req.NamespacedName, ms); err != nil {
		if apierrors.IsNotFound(err) {
			r.states.forget(req.NamespacedName)
			forgetMetrics(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	st.catchUp(ms)
	defer observeStatus(ms)
	if !ms.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, ms)
	}
	if !controllerutil.ContainsFinalizer(ms, Finalizer) {
		orig := ms.DeepCopy()
		controllerutil.AddFinalizer(ms, Finalizer)
		if err := r.Client.Patch(ctx, ms, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
		st.wrote(ms)
	}
	if ms.Spec.Suspend {
		ctrl.LoggerFrom(ctx).V(1).Info("suspended")
		return ctrl.Result{}, nil
	}
	return r.sync(ctx, ms, st)
}

// finishInFlight is ctx, except that when ctx is cancelled (the manager
// stops: SIGTERM) the returned context lives on for grace more, so that a
// reconcile in flight finishes its applies and writes its status rather
// than stopping between two objects of a target. The manager waits for
// reconciles in flight before it returns.
func finishInFlight(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		timer := time.AfterFunc(grace, func() {
			cancel(fmt.Errorf("shutting down: the reconcile did not finish within the shutdown grace of %s", grace))
		})
		context.AfterFunc(out, func() { timer.Stop() })
	})
	return out, func() {
		stop()
		cancel(context.Canceled)
	}
}

// sync is one pass: dependencies -> sources -> evaluate -> apply -> prune
// -> status.
func (r *Reconciler) sync(ctx context.Context, ms *v1alpha1.ManifestSync, st *syncState) (ctrl.Result, error) {
	orig := ms.DeepCopy()
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))

	if err := r.checkTenancy(ms); err != nil {
		return ctrl.Result{}, r.failed(ctx, st, orig, ms, nil, v1alpha1.ReasonServiceAccountRequired, err, now)
	}
	if !st.wroteInventory(ms) { // else ours, read back whole when we wrote it
		if err := eachInventoryItem(ms, func(inventoryItem) bool { return true }); err != nil {
			// Nothing is applied or pruned: the inventory guards both.
			return ctrl.Result{}, r.failed(ctx, st, orig, ms, nil, v1alpha1.ReasonInventoryInvalid, fmt.Errorf("nothing was applied or pruned: %w", err), now)
		}
	}
	// Read through again when needed (to prune; to rebuild records after
	// a restart), never held whole: with a fan-out, tens of thousands of
	// entries.
	inventory := inventoryStream(ms)
	blocked, err := r.checkDependencies(ctx, ms)
	if err != nil {
		return ctrl.Result{}, err
	}
	if blocked != nil {
		return r.waitForDependencies(ctx, st, orig, ms, blocked)
	}
	snaps, err := r.fetchSources(ctx, ms, st)
	if err != nil {
		// A source whose verify refused what it read (a git commit or
		// tag, an oci artifact) is told apart: nothing is applied, the
		// last good state stays, and it is retried as other source
		// failures are (a signed commit may follow).
		reason := v1alpha1.ReasonSourceFailed
		if _, ok := errors.AsType[*source.VerifyError](err); ok {
			reason = v1alpha1.ReasonSourceVerifyFailed
		}
		return r.retrySoon(ctx, st, r.failed(ctx, st, orig, ms, nil, reason, err, now))
	}
	res, err := r.evaluate(ctx, ms, snaps, st)
	if err != nil {
		return ctrl.Result{}, r.failed(ctx, st, orig, ms, nil, v1alpha1.ReasonEvalFailed, err, now)
	}
	if err := res.Err(); err != nil {
		reason := v1alpha1.ReasonEvalFailed
		var verr *engine.ValidationError
		if errors.As(err, &verr) {
			reason = v1alpha1.ReasonValidationFailed
		}
		return ctrl.Result{}, r.failed(ctx, st, orig, ms, res, reason, err, now)
	}

	outcomes := r.syncTargets(ctx, ms, res, st, inventory)
	pr := r.prune(ctx, ms, outcomes, inventory)
	redactOutcomes(res.Redactor, outcomes, &pr)
	forgetGone(ms, st, outcomes) // syncTargets remembered the others
	r.countObjects(ms, outcomes, pr)

	wasReady := apimeta.IsStatusConditionTrue(ms.Status.Conditions, v1alpha1.ConditionReady)
	wasFailing := healthFailed(ms)
	reason, msg, verdict := setSyncedStatus(ms, res, outcomes, pr, r.Options.inventoryGzipThreshold(), now)
	if reason == v1alpha1.ReasonApplyFailed && pr.err == nil && refusedOnly(outcomes) {
		// Not retried soon: the sync waits for a change of the spec or
		// of a Namespace's allow-from annotation (watched).
		reason = v1alpha1.ReasonTargetNotAllowed
		recordEvaluation(ms, res, outputDigest(res), reason, now)
		setConditions(ms, reason, msg)
		apimeta.SetStatusCondition(&ms.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
			ObservedGeneration: ms.Generation, Reason: reason, Message: truncate(msg)})
	}
	observeHealth(ms, outcomes)
	logSync(ctx, res, outcomes, pr, reason)
	r.syncEvents(ms, res, outcomes, pr, wasReady)
	r.notAllowedEvents(ms, outcomes)
	if healthFailed(ms) && !wasFailing {
		r.event(ms, true, EventHealthCheckFailed, "Wait", apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionHealthy).Message)
	}
	if err := r.patchStatus(ctx, st, orig, ms); err != nil {
		return ctrl.Result{}, err
	}
	if after, ok := writeWarsOnly(outcomes); ok && reason == v1alpha1.ReasonConflict {
		// Retried when the first refused write is allowed again, not
		// after a backoff that the war's quick failures have grown.
		return ctrl.Result{RequeueAfter: after}, nil
	}
	if reason == v1alpha1.ReasonApplyFailed {
		return r.retrySoon(ctx, st, fmt.Errorf("%w: %s", errTargets, msg))
	}
	switch reason {
	case v1alpha1.ReasonSynced, v1alpha1.ReasonProgressing, v1alpha1.ReasonHealthCheckFailed:
		// Health is not polled: the watches of the objects wake the
		// ManifestSync when their status changes, and a timer when
		// spec.timeout passes.
	default:
		return ctrl.Result{}, fmt.Errorf("%w: %s", errTargets, msg)
	}
	st.transientFailures = 0
	interval := syncInterval(ms)
	if !verdict.recheck.IsZero() {
		interval = min(interval, max(time.Until(verdict.recheck), time.Second))
	}
	return ctrl.Result{RequeueAfter: interval}, nil
}

// syncInterval is how long after a sync the next one runs: spec.interval.
func syncInterval(ms *v1alpha1.ManifestSync) time.Duration {
	if ms.Spec.Interval != nil && ms.Spec.Interval.Duration > 0 {
		return ms.Spec.Interval.Duration
	}
	return defaultInterval
}

// healthFailed reports whether ms's Healthy condition says its health
// check failed.
func healthFailed(ms *v1alpha1.ManifestSync) bool {
	c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionHealthy)
	return c != nil && c.Reason == v1alpha1.ReasonHealthCheckFailed
}

// retrySoon schedules the retry of a sync that failed for a cause that
// goes away by itself (a git server or a cluster unreachable, an apply
// refused for the moment): with a backoff from RetryMin that stops
// growing at TransientRetryMax, so that the sync converges within seconds
// of the cause's end, where the controller's own backoff would have grown
// to minutes. err is logged, as the controller logs the errors returned.
func (r *Reconciler) retrySoon(ctx context.Context, st *syncState, err error) (ctrl.Result, error) {
	st.transientFailures++
	after := orDefault(r.Options.RetryMin, time.Second)
	limit := r.Options.transientRetryMax()
	for i := 1; i < st.transientFailures && after < limit; i++ {
		after *= 2
	}
	after = min(after, limit)
	ctrl.LoggerFrom(ctx).Error(err, "sync failed; retrying", "after", after.String(), "failures", st.transientFailures)
	return ctrl.Result{RequeueAfter: after}, nil
}

// logSync logs a sync that did something; steady resyncs stay quiet.
func logSync(ctx context.Context, res *engine.Result, outcomes []*targetOutcome, pr pruneResult, reason string) {
	var applied, drifted, steady int
	for _, o := range outcomes {
		t := o.tally()
		applied += t.created + t.configured
		drifted += len(o.drift)
		if o.steady {
			steady++
		}
	}
	if steady == len(outcomes) && len(pr.pruned) == 0 && reason == v1alpha1.ReasonSynced {
		return
	}
	ctrl.LoggerFrom(ctx).Info("synced", "revision", v1alpha1.ShortRevision(res.Revision), "result", reason,
		"targets", len(outcomes), "steadyTargets", steady, "applied", applied, "drifted", drifted, "pruned", len(pr.pruned))
}

// failed reports a sync that stopped before any target was touched: a
// source could not be read, or the evaluation failed. The error goes back
// to the controller, which retries with backoff.
func (r *Reconciler) failed(ctx context.Context, st *syncState, orig, ms *v1alpha1.ManifestSync, res *engine.Result, reason string, cause error, now metav1.Time) error {
	if res != nil {
		recordEvaluation(ms, res, "", reason, now)
	}
	cause = st.redactor(res).Error(cause)
	msg := setFailedTargets(ms, res, reason, cause)
	setConditions(ms, reason, msg)
	event := EventSyncFailed
	switch reason {
	case v1alpha1.ReasonValidationFailed:
		event = EventValidationFailed
	case v1alpha1.ReasonSourceVerifyFailed:
		event = EventSourceVerifyFailed
	}
	r.event(ms, true, event, "Evaluate", msg)
	failuresTotal.WithLabelValues(ms.Namespace, ms.Name, "", reason).Inc()
	if err := r.patchStatus(ctx, st, orig, ms); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// evaluate runs the engine over the snapshots, with the cluster's
// namespaces for namespaceSelector targets and its discovery for scopes.
// The result of the last successful evaluation is reused while the spec,
// the sources' revisions and the selectable namespaces are unchanged, so
// that the resyncs of steady state cost no evaluation either.
func (r *Reconciler) evaluate(ctx context.Context, ms *v1alpha1.ManifestSync, snaps map[string]*engine.Snapshot, st *syncState) (*engine.Result, error) {
	opts := engine.Options{Limits: r.Options.Limits, Scope: r.scope, Compact: true}
	var err error
	if opts.Namespaces, opts.ClusterNamespaces, err = r.targetNamespaces(ctx, ms, st); err != nil {
		return nil, err
	}
	caps, err := r.chartOptions(ctx, ms, &opts)
	if err != nil {
		return nil, err
	}
	key := evalKey{uid: ms.UID, generation: ms.Generation, revisions: map[string]string{}, namespaces: opts.Namespaces, clusterNamespaces: opts.ClusterNamespaces, capabilities: caps}
	for name, snap := range snaps {
		key.revisions[name] = snap.Revision
	}
	if st.eval != nil && st.eval.result != nil && st.eval.key.equal(key) {
		return st.eval.result, nil // unchanged inputs: nothing to evaluate
	}
	if st.eval != nil {
		st.eval.result = nil
	}
	start := time.Now()
	res, err := r.Options.evaluatorFor(&ms.Spec).Evaluate(ctx, engine.Spec{Sync: &ms.Spec, Snapshots: snaps, Name: ms.Name}, opts)
	evalDuration.WithLabelValues(ms.Namespace, ms.Name).Observe(time.Since(start).Seconds())
	if err == nil && res.Err() == nil {
		st.eval = &lastEval{key: key, result: res, redactor: res.Redactor}
	}
	return res, err
}

// scope tells namespaced kinds from cluster-scoped ones by discovery.
func (r *Reconciler) scope(gvk schema.GroupVersionKind) (namespaced, ok bool) {
	m, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return engine.BuiltinScope(gvk)
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, true
}

// Namespaces lists a cluster's live namespaces (not being deleted), as
// the engine matches namespaceSelectors against them (ssa.Namespaces).
func Namespaces(ctx context.Context, c client.Reader) ([]engine.Namespace, error) {
	return ssa.Namespaces(ctx, c)
}

// forgetGone drops the records and metric series of targets that are no
// longer evaluated.
func forgetGone(ms *v1alpha1.ManifestSync, st *syncState, outcomes []*targetOutcome) {
	present := map[string]bool{}
	for _, o := range outcomes {
		present[o.target.ID()] = true
	}
	for id := range st.targets {
		if !present[id] {
			delete(st.targets, id)
			forgetTargetMetrics(ms.Namespace, ms.Name, id)
		}
	}
}

func (r *Reconciler) countObjects(ms *v1alpha1.ManifestSync, outcomes []*targetOutcome, pr pruneResult) {
	for _, o := range outcomes {
		id := o.target.ID()
		if n := len(o.drift); n > 0 {
			driftTotal.WithLabelValues(ms.Namespace, ms.Name, id, driftAction(ms.Spec.Policy.Drift)).Add(float64(n))
		}
		if t := o.settled; t.created+t.configured > 0 {
			objectsTotal.WithLabelValues(ms.Namespace, ms.Name, id, metricApplied).Add(float64(t.created + t.configured))
		}
		if t := o.settled; t.unchanged > 0 {
			objectsTotal.WithLabelValues(ms.Namespace, ms.Name, id, metricSkipped).Add(float64(t.unchanged))
		}
		for _, c := range o.changes {
			var war *writeWarError
			if errors.As(c.Err, &war) {
				writeWarsTotal.WithLabelValues(ms.Namespace, ms.Name, id).Inc()
			}
			switch {
			case c.wrote():
				objectsTotal.WithLabelValues(ms.Namespace, ms.Name, id, metricApplied).Inc()
			case c.Action != ActionFailed:
				objectsTotal.WithLabelValues(ms.Namespace, ms.Name, id, metricSkipped).Inc()
			}
		}
		if !o.ok() {
			reason := v1alpha1.ReasonApplyFailed
			switch {
			case len(o.failures()) > 0:
			case o.empty != nil:
				reason = v1alpha1.ReasonEmptyOutput
			case o.hooks != nil && o.hooks.failed != nil:
				reason = v1alpha1.ReasonHookFailed
			case o.hooks != nil && o.hooks.pending():
				continue // waiting for a hook fails nothing
			default:
				reason = v1alpha1.ReasonConflict
			}
			failuresTotal.WithLabelValues(ms.Namespace, ms.Name, id, reason).Inc()
		}
	}
	if n := len(pr.pruned); n > 0 {
		objectsTotal.WithLabelValues(ms.Namespace, ms.Name, "", metricPruned).Add(float64(n))
	}
}

// finalize handles a deleted ManifestSync: its objects are pruned
// (deletion Delete; those that opt out of pruning are orphaned) or orphaned
// (Orphan), then the finalizer is removed. When some cannot be (a remote
// cluster is unreachable, an account lost its rights), finalize fails and
// is retried, until Options.DeletionTimeout after the deletion: then the
// finalizer is removed anyway, with a Warning event naming what was left.
func (r *Reconciler) finalize(ctx context.Context, ms *v1alpha1.ManifestSync) error {
	if !controllerutil.ContainsFinalizer(ms, Finalizer) {
		return nil
	}
	var (
		errs         []error
		pruned, left []string
	)
	clusters := clusterMemo{r: r, ms: ms}
	fail := func(it inventoryItem, c *cluster, err error) {
		// A cluster's failure leaves its other objects at once.
		if err = clusters.failure(it.cluster, c, err); !slices.Contains(errs, err) { // a cluster's failure, once
			errs = append(errs, err)
		}
		left = append(left, it.describe())
	}
	inventory, err := parseInventory(ms)
	if err != nil { // as a failure to prune: the deletion timeout applies
		errs = append(errs, fmt.Errorf("nothing was pruned: %w", err))
		left = append(left, "every object of its inventory")
	}
	// Every object is read first, so that the last wave goes first.
	var reads, owned []pruneCandidate
	for _, it := range inventory {
		c, err := clusters.get(ctx, it.cluster)
		if err != nil {
			fail(it, c, err)
			continue
		}
		reads = append(reads, pruneCandidate{it: it, c: c})
	}
	for i, err := range r.readOwned(ctx, ms, &clusters, reads) {
		switch p := reads[i]; {
		case err != nil:
			fail(p.it, p.c, err)
		case p.obj != nil:
			owned = append(owned, p)
		}
	}
	slices.SortStableFunc(owned, func(a, b pruneCandidate) int { return b.wave() - a.wave() })
	for wave := range waves(owned) {
		results := clusters.eachOf(len(wave), func(i int) string { return wave[i].it.cluster }, func(i int) error {
			return finalizeObject(ctx, ms, &wave[i])
		})
		for i, err := range results {
			switch p := wave[i]; {
			case err != nil:
				fail(p.it, p.c, err)
			case p.deleted:
				pruned = append(pruned, p.it.describe())
			}
		}
	}
	if len(pruned) > 0 {
		r.event(ms, false, EventPruned, "Delete", fmt.Sprintf("Pruned %s: %s", plural.Count(len(pruned), "object"), strings.Join(pruned, ", ")))
	}
	if err := errors.Join(errs...); err != nil {
		timeout := r.Options.deletionTimeout()
		if time.Since(ms.DeletionTimestamp.Time) < timeout {
			r.event(ms, true, EventSyncFailed, "Delete", err.Error())
			return err
		}
		// Its own action: events of one reason and action are one series,
		// whose note would stay the first failure's.
		r.event(ms, true, EventSyncFailed, "RemoveFinalizer", fmt.Sprintf("Removed the finalizer after %s, leaving behind %s: %s (%v)",
			timeout, plural.Count(len(left), "object"), strings.Join(left, ", "), err))
		ctrl.LoggerFrom(ctx).Info("deletion timed out; objects left behind", "objects", left, "timeout", timeout.String())
	}
	orig := ms.DeepCopy()
	controllerutil.RemoveFinalizer(ms, Finalizer)
	if err := r.Client.Patch(ctx, ms, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the finalizer: %w", err)
	}
	return nil
}

// finalizeObject deletes or orphans one object of ours, per
// spec.policy.deletion, setting p.deleted when it deleted it.
func finalizeObject(ctx context.Context, ms *v1alpha1.ManifestSync, p *pruneCandidate) error {
	if ms.Spec.Policy.Deletion == v1alpha1.DeletionOrphan {
		return orphanOwned(ctx, p.c, p.it, p.obj)
	}
	deleted, err := deleteOwned(ctx, p.c, p.it, p.obj)
	switch {
	case err != nil:
		return err
	case deleted:
		p.deleted = true
		return nil
	}
	// Kept (pruning disabled): it must not name a ManifestSync that is
	// gone.
	return orphanOwned(ctx, p.c, p.it, p.obj)
}
