//go:build race

package main

// testWorkerLimit is the eval workers' memory limit in tests: the race
// detector's runtime alone takes more than 128 MiB of a worker's resident
// set.
const testWorkerLimit = "768Mi"
