// Command cmd runs workload W6 alone on a fresh local control plane and
// prints its rows as a report: go run ./bench/w6/cmd -rounds 3.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/manifestsync/manifestsync/bench/harness"
	"github.com/manifestsync/manifestsync/bench/w6"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds of ours and the baselines (at least 3)")
	flag.Parse()
	if err := run(*rounds); err != nil {
		fmt.Fprintln(os.Stderr, "w6:", err)
		os.Exit(1)
	}
}

func run(rounds int) error {
	dir, err := os.MkdirTemp("", "bench-w6-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := harness.StartCluster(dir)
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep := &harness.Report{Started: time.Now()}
	rows, err := w6.Run(ctx, c, rounds)
	rep.Rows, rep.Duration = rows, time.Since(rep.Started)
	if werr := rep.Write(os.Stdout); werr != nil && err == nil {
		err = werr
	}
	return err
}
