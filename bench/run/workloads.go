package main

import (
	"github.com/manifestsync/manifestsync/bench/w11"
	"github.com/manifestsync/manifestsync/bench/w5"
	"github.com/manifestsync/manifestsync/bench/w6"
)

// W5 (git), W6 (memory), W8 (object-set memory), W10 (Helm releases) and
// W11 (the web UI server) and W12 (what bin/engine costs against an
// earlier commit's) run after W1/W2, each on a control plane of its own.
func init() {
	clusterWorkloads = append(clusterWorkloads,
		clusterWorkload{name: "W5", run: w5.Run},
		clusterWorkload{name: "W6", run: w6.Run},
		clusterWorkload{name: "W8", run: w6.RunObjectSet},
		clusterWorkload{name: "W10", run: w6.RunHelm},
		clusterWorkload{name: "W11", runNotes: w11.Run},
		clusterWorkload{name: "W12", runNotes: w6.RunCost},
	)
}
