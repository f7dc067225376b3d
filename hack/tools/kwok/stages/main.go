// Command stages prints the Stage objects kwok's own kwokctl gives a
// cluster by default (a node becomes Ready; a pod becomes Running and
// Ready, completes when a Job owns it, and goes when deleted), as one kwok
// configuration file: the kwok binary alone starts with no stages.
// hack/envtest.sh writes it to bin/envtest/kwok.yaml for operator/testenv.
//
// kwokctl's node heartbeat stage is left out: the test bed runs no node
// lifecycle controller, so nothing reads a heartbeat.
package main

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	docs := []string{
		nodefast.DefaultNodeInit,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, doc := range docs {
		docs[i] = strings.TrimSpace(doc)
	}
	fmt.Println(strings.Join(docs, "\n---\n"))
}
