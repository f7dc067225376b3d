// Package starlark is the sandbox in which ManifestSync runs Starlark
// transforms.
//
// An Interpreter loads a script (a file of a source snapshot, or inline text)
// and calls its functions. Scripts see only the predeclared globals the
// engine passes (the stdlib modules) and the Starlark universe: there is no
// file, network, environment or clock access, and time.now() returns a fixed
// time. load() resolves only inside the source snapshots given as Files:
// relative to the loading file ("lib/x.star"), from its source's root
// ("//lib/x.star"), or from another source's root ("@other//lib/x.star");
// a path that escapes its source is an error.
//
// Every Load and Call is bounded by Limits: a step limit, a call depth limit
// and a wall-clock timeout, each ending the evaluation with a *LimitError
// while the process stays healthy; Limits.Objects bounds the number and size
// of the objects a transform returns. starlark-go cannot bound memory in
// process: a single built-in call such as "x" * 700000000 allocates what it
// asks for, so untrusted scripts belong in a worker process with a memory
// limit.
//
// Script failures are *Error values with the script's file:line ("SOURCE/PATH"
// names, "<inline>" for inline scripts) and a backtrace. Compiled programs
// are cached by the sha256 of their text, so one script evaluated for many
// targets is parsed once. The package also converts between Go's
// JSON-shaped values and Starlark values (ToValue, FromValue), and formats
// scripts of its dialect (Format, for `engine fmt`).
//
// It must not import client-go, controller-runtime, net/http or the stdlib
// package (stdlib builds on it; the engine wires the two together).
package starlark
