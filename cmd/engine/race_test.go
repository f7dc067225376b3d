//go:build race

package main

// testWorkerLimit is the eval workers' memory limit in tests: the race
// detector's runtime alone takes more than 128 MiB of a worker's resident
// set.
const testWorkerLimit = "768Mi"

// testRSSSlack is how far past testWorkerLimit the peak resident size of
// an engine command and its worker may go: a race-enabled worker is
// bounded by the parent's watchdog only, which reads its size every 50ms.
const testRSSSlack = 512 << 20
