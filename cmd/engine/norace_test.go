//go:build !race

package main

// testWorkerLimit is the eval workers' memory limit in tests.
const testWorkerLimit = "128Mi"

// testRSSSlack is how far past testWorkerLimit the peak resident size of
// an engine command and its worker may go: the worker is bounded by
// RLIMIT_AS.
const testRSSSlack = 64 << 20
