//go:build race

package worker

// The race detector's runtime maps terabytes of shadow memory and cannot
// run under RLIMIT_AS; a race-enabled worker is bounded by the parent's
// watchdog and the Go soft limit only.
const raceEnabled = true
