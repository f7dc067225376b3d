package worker

import "fmt"

// Limits a worker is killed for, as found in KilledError.Limit.
const (
	LimitMemory  = "memory"
	LimitTimeout = "timeout"
)

// KilledError says why an evaluation ended with its worker: a limit
// (memory, timeout), the caller's context, or a crash.
type KilledError struct {
	Limit  string // LimitMemory, LimitTimeout, or empty
	Value  string // the limit, e.g. "256 MiB" or "1m0s"
	Detail string // more on what happened, e.g. a crash's "panic: ..." line
	Err    error  // the context's error when it ended the evaluation
}

func (e *KilledError) Error() string {
	var msg string
	switch {
	case e.Limit == LimitMemory:
		msg = "evaluation exceeded its memory limit of " + e.Value
	case e.Limit != "":
		msg = fmt.Sprintf("evaluation was killed: %s of %s exceeded", e.Limit, e.Value)
	case e.Err != nil:
		msg = "evaluation was killed: " + e.Err.Error()
	default:
		msg = "evaluation worker crashed"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the context's error, if it ended the evaluation.
func (e *KilledError) Unwrap() error { return e.Err }

// formatBytes writes a memory limit the way people set it: "256 MiB".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
