// Command kube-controller-manager is the Kubernetes controller manager built
// from the k8s.io/kubernetes Go module, for the project's workload test bed
// (operator/testenv WithWorkloads): Deployments, StatefulSets, DaemonSets
// and Jobs roll out through the real controllers.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
