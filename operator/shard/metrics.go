package shard

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Prometheus metrics of sharding, on controller-runtime's registry (served
// by the manager's metrics endpoint). Each replica serves its own, told
// apart by the scrape's target labels (pod, under the chart the replica's
// ID) rather than a label of ours: the metrics are registered before the
// replica's ID is known, and a constant label would repeat the pod's. The
// sharder's are served by the leader.
var (
	ownedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "manifestsync_shard_owned",
		Help: "ManifestSyncs this replica owns (labelled with its ID, draining or not).",
	})
	movesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "manifestsync_shard_moves_total",
		Help: "ManifestSyncs the sharder gave an owner: assigned (unowned, or drained by their old owner) or expired (their owner's Lease expired).",
	}, []string{"reason"})
	drainsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "manifestsync_shard_drains_total",
		Help: "ManifestSyncs the sharder told their live owner to drain.",
	})
	acksTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "manifestsync_shard_drain_acks_total",
		Help: "ManifestSyncs this replica let go of when told to drain.",
	})
	fencesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "manifestsync_shard_fences_total",
		Help: "Times this replica's fence fell: its shard Lease was not renewed in time, so it stopped writing.",
	})
	sharderLive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "manifestsync_shard_members",
		Help: "Replicas with a live shard Lease, as the sharder (the leader) sees them.",
	})
)

// Reasons of movesTotal.
const (
	moveAssigned = "assigned"
	moveExpired  = "expired"
)

func init() {
	ctrlmetrics.Registry.MustRegister(ownedGauge, movesTotal, drainsTotal, acksTotal, fencesTotal, sharderLive)
	// Each reason's series exists from the start, at 0, so that a rate
	// over it is 0 rather than no data before the first move.
	for _, r := range []string{moveAssigned, moveExpired} {
		movesTotal.WithLabelValues(r)
	}
}
