// Package worker runs engine evaluations in child processes with a memory
// limit, so that a script which allocates without bound ends with a clear
// error instead of taking its host down (DESIGN.md §3, the sandbox).
// starlark-go cannot bound memory in-process; an operating-system process
// can.
//
// Besides evaluations, a worker runs Starlark test files (Pool.RunTest)
// and validates objects against CUE packages (Pool.Validate), which are
// user code too, under the same limits.
//
// A Pool keeps a few long-lived workers, each the same binary started with
// a hidden subcommand that calls Serve, and reuses them across evaluations
// so that one costs a round trip, not a process start. Parent and worker
// speak length-prefixed JSON over the worker's stdin and stdout. A worker
// bounds itself (RLIMIT_AS above its start-up size, and a Go soft memory
// limit); the parent watches its own resident memory (less the shared pages
// of the executable) and its wall-clock time and
// kills it past either. A worker that is killed, crashes or times out is
// replaced by a new one on the next evaluation, and the evaluation returns
// a *KilledError naming the limit.
//
// Like the engine, it must not import client-go, controller-runtime or
// net/http: it takes data and processes, never a cluster.
package worker
