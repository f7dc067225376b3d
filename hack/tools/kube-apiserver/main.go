// Command kube-apiserver is the Kubernetes API server built from the
// k8s.io/kubernetes Go module, for the project's envtest assets: no
// container runtime or download is needed to test against a real server.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
