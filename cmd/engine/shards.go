package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/manifestsync/manifestsync/operator/shard"
)

// shardFlags are --shards, --shard-id and the timings of the replica's
// Lease.
type shardFlags struct {
	mode string // "" or "off", or "auto"
	id   string
	// leaseDuration, renewDeadline and retryPeriod are the Member's
	// (shard.ValidateTimings).
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

func (f *shardFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.mode, "shards", "off",
		`"auto": every replica reconciles its share of the ManifestSyncs, assigned by the leader over the replicas' Leases (docs/sharding.md); "off": the leader reconciles all`)
	fl.StringVar(&f.id, "shard-id", "", "this replica's ID with --shards auto (its Lease manifestsync-shard-ID, the value of the label shard.manifestsync.dev/owner); default: $POD_NAME, else the host's name")
	fl.DurationVar(&f.leaseDuration, "shard-lease-duration", shard.DefaultLeaseDuration,
		"with --shards auto, how long after this replica's last renewal of its Lease the leader gives its ManifestSyncs to the others (whole seconds)")
	fl.DurationVar(&f.renewDeadline, "shard-renew-deadline", shard.DefaultRenewDeadline,
		"with --shards auto, how long after its last renewal of its Lease this replica stops writing and exits; less than --shard-lease-duration, the difference being the margin for clocks that disagree")
	fl.DurationVar(&f.retryPeriod, "shard-retry-period", shard.DefaultRetryPeriod,
		"with --shards auto, how often this replica renews its Lease; less than half --shard-renew-deadline")
}

// sharding is what --shards auto adds to the operator: this replica's
// Member (its Lease) and Replica (its filter and fence), and the sharder
// it runs while it holds the leader lease.
type sharding struct {
	id, namespace string
	timings       shardFlags
	member        *shard.Member
	replica       *shard.Replica
	memberDone    chan error
	stopMember    context.CancelFunc
}

// newSharding checks the flags of --shards auto: nil without it. The
// replica's ID is --shard-id, else $POD_NAME, else the host's name (a
// pod's); its Lease lives in --leader-election-namespace, else the
// operator's own.
func newSharding(f *operatorFlags) (*sharding, error) {
	switch f.shards.mode {
	case "", "off":
		return nil, nil
	case "auto":
	default:
		return nil, usageErr("operator: --shards %q: want auto or off", f.shards.mode)
	}
	id := f.shards.id
	if id == "" {
		id = strings.TrimSpace(os.Getenv("POD_NAME"))
	}
	if id == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, usageErr("operator: --shards auto: no --shard-id, $POD_NAME or host name: %v", err)
		}
		id = strings.ToLower(h)
	}
	if err := shard.ValidateID(id); err != nil {
		return nil, usageErr("operator: --shard-id: %v", err)
	}
	t := f.shards
	if err := shard.ValidateTimings(t.leaseDuration, t.renewDeadline, t.retryPeriod); err != nil {
		return nil, usageErr("operator: --shard-lease-duration %v, --shard-renew-deadline %v, --shard-retry-period %v: %v",
			t.leaseDuration, t.renewDeadline, t.retryPeriod, err)
	}
	ns := f.leaderElectNS
	if ns == "" {
		if own := ownNamespace(os.Getenv, os.ReadFile); len(own) > 0 {
			ns = own[0]
		}
	}
	if ns == "" {
		return nil, usageErr("operator: --shards auto needs a namespace for its Leases: --leader-election-namespace, or $POD_NAMESPACE")
	}
	return &sharding{id: id, namespace: ns, timings: t}, nil
}

// guard makes the replica's Member, renewing its Lease through a client
// of its own, and guards cfg, of every other client of the operator's
// cluster: no write leaves once the fence has fallen (shard.Member.Guard).
func (s *sharding) guard(cfg *rest.Config, scheme *runtime.Scheme) error {
	c, err := client.New(rest.CopyConfig(cfg), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	s.member = &shard.Member{Client: c, Namespace: s.namespace, ID: s.id, Log: ctrl.Log.WithName("shard"),
		LeaseDuration: s.timings.leaseDuration, RenewDeadline: s.timings.renewDeadline, RetryPeriod: s.timings.retryPeriod}
	cfg.Wrap(s.member.Guard)
	return nil
}

// selector is the label selector of this replica's ManifestSync cache:
// sel (--watch-label-selector) and its own shard.
func (s *sharding) selector(sel labels.Selector) labels.Selector {
	if s == nil {
		return sel
	}
	reqs, _ := shard.OwnerSelector(s.id).Requirements()
	return sel.Add(reqs...)
}

// setup adds the Lease, the replica's filter and the elected sharder
// (over the ManifestSyncs sel matches) to mgr, and returns the wrapper of
// the reconciler. The reconciler's own shutdown grace passes to the
// replica's fence, which honours it but cuts a reconcile short at once
// when the fence falls.
func (s *sharding) setup(mgr manager.Manager, cfg *rest.Config, scheme *runtime.Scheme, f *operatorFlags, sel labels.Selector, leaseName string) (func(reconcile.Reconciler) reconcile.Reconciler, error) {
	log := ctrl.Log.WithName("shard")
	s.replica = &shard.Replica{Reader: mgr.GetCache(), Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Selector: sel, ID: s.id, Member: s.member,
		ShutdownGrace: f.reconcilerOpts.ShutdownGrace}
	f.reconcilerOpts.ShutdownGrace = time.Nanosecond // the replica's fence holds the grace
	f.reconcilerOpts.ShardID = s.id                  // its objects carry its shard label; it caches only those
	// No write to a remote cluster once fenced either.
	f.reconcilerOpts.RemoteTransport = s.member.Guard
	if err := mgr.Add(s.replica); err != nil {
		return nil, err
	}
	sh, err := shard.NewSharder(cfg, scheme, mgr.GetClient(), s.namespace, sel)
	if err != nil {
		return nil, err
	}
	sh.Log = log.WithName("sharder")
	if err := mgr.Add(&shard.Elected{Sharder: sh, Config: cfg, Namespace: s.namespace, Name: leaseName, Identity: s.id,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod}); err != nil {
		return nil, err
	}
	return s.replica.Wrap, nil
}

// start runs the Lease beside the manager, outliving its context: while
// the syncs in flight finish after SIGTERM the Lease is still renewed.
// When the fence falls it stops the manager (stop) and the operator exits
// with an error, to be restarted as a new member. It returns once the
// Lease is written (the guard lets no write out before), or ctx ends.
func (s *sharding) start(ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopMember = cancel
	s.memberDone = make(chan error, 1)
	go func() {
		err := s.member.Run(ctx)
		if err != nil {
			stop()
		}
		s.memberDone <- err
	}()
	for s.member.Deadline().IsZero() && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// finish stops the Lease once the manager has stopped, and deletes it so
// that the sharder moves this replica's ManifestSyncs at once; it returns
// shard.ErrFenced if the fence fell.
func (s *sharding) finish() error {
	s.stopMember()
	err := <-s.memberDone
	if errors.Is(err, shard.ErrFenced) {
		return fmt.Errorf("operator: replica %s: %w", s.id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.member.Release(ctx); err != nil {
		ctrl.Log.WithName("shard").Error(err, "releasing the shard lease")
	}
	return err
}
