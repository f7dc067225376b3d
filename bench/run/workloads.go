package main

import (
	"context"
	"flag"

	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/bench/w11"
	"github.com/manifestsync/manifestsync/bench/w5"
	"github.com/manifestsync/manifestsync/bench/w6"
	"github.com/manifestsync/manifestsync/bench/w9"
)

// w9Syncs is how many ManifestSyncs W9 spreads over its replicas: 1,000
// as the issue measures, fewer to try it out on a busy machine.
var w9Syncs = flag.Int("w9-syncs", w9.DefaultSyncs, "ManifestSyncs of W9 (sharding over replicas)")

// W5 (git), W6 (memory), W8 (object-set memory), W9 (sharding over
// replicas), W10 (Helm releases) and W11 (the web UI server) and W12
// (what bin/engine costs against an earlier commit's) run after W1/W2,
// each on a control plane of its own; W9's logs the writes of ConfigMaps.
func init() {
	clusterWorkloads = append(clusterWorkloads,
		clusterWorkload{name: "W5", run: w5.Run},
		clusterWorkload{name: "W6", run: w6.Run},
		clusterWorkload{name: "W8", run: w6.RunObjectSet},
		clusterWorkload{name: "W9", options: []harness.ClusterOption{harness.WithWriteAudit("configmaps")},
			runNotes: func(ctx context.Context, c *harness.Cluster, rounds int) ([]harness.Row, []string, error) {
				return w9.Run(ctx, c, w9.Config{Syncs: *w9Syncs, Rounds: rounds})
			}},
		clusterWorkload{name: "W10", run: w6.RunHelm},
		clusterWorkload{name: "W11", runNotes: w11.Run},
		clusterWorkload{name: "W12", runNotes: w6.RunCost},
	)
}
