// Command kube-scheduler is the Kubernetes scheduler built from the
// k8s.io/kubernetes Go module, for the project's workload test bed
// (operator/testenv WithWorkloads): it binds pods to kwok's fake nodes, and
// leaves a pod no node fits pending, as a cluster would.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
