package shard

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Elected runs a Sharder only while this replica holds the operator's
// leader lease. With --shards auto every replica reconciles, so the
// manager elects no leader of its own (its runnables all run everywhere);
// the sharder alone is elected, with the Lease and timings the manager
// uses when it elects. Two sharders at once (a leader that has not yet
// noticed it lost) do no harm: every label write is conditional on what it
// read, and each takes a dead replica's ManifestSyncs only after expiry.
type Elected struct {
	Sharder *Sharder
	Config  *rest.Config
	// Namespace and Name of the leader Lease; Identity of this replica.
	Namespace, Name, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// NeedLeaderElection is false: it elects itself.
func (e *Elected) NeedLeaderElection() bool { return false }

// Start campaigns for the lease until ctx ends, running the sharder while
// it leads.
func (e *Elected) Start(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(e.Config))
	if err != nil {
		return fmt.Errorf("sharder election: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, e.Namespace, e.Name, nil, cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: e.Identity})
	if err != nil {
		return fmt.Errorf("sharder election: %w", err)
	}
	if err := e.Sharder.startCache(ctx); err != nil {
		return err
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod,
			ReleaseOnCancel: true, Name: e.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					e.Sharder.Log.Info("leading: sharding", "lease", e.Namespace+"/"+e.Name)
					if err := e.Sharder.loop(ctx); err != nil {
						e.Sharder.Log.Error(err, "sharding")
					}
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("sharder election: %w", err)
		}
		le.Run(ctx)
	}
	return nil
}
