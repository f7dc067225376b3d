//go:build !race

package main

// testWorkerLimit is the eval workers' memory limit in tests.
const testWorkerLimit = "128Mi"
