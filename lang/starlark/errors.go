package starlark

import (
	"errors"
	"fmt"
	"strings"

	"go.starlark.net/resolve"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Error is a script failure: the position of the innermost script frame, the
// message, and the backtrace. Syntax and resolve errors, runtime errors and
// load() failures all become an *Error, so callers find them with errors.As
// whatever wraps them.
type Error struct {
	Pos       syntax.Position // File is "source/path", or the inline script's name
	Msg       string
	Backtrace string // the Starlark call stack when there is one; other errors of a syntax error list

	cause error
}

// Error returns "file:line:col: msg", or only msg when the position is unknown.
func (e *Error) Error() string {
	if e.Pos.IsValid() {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Msg
}

// Unwrap returns the error the script failed with (a *starlark.EvalError,
// syntax.Error or resolve.ErrorList), so errors.Is can see what a built-in
// returned.
func (e *Error) Unwrap() error { return e.cause }

// loadError is a load() statement that could not be resolved: its message
// names the module as written ("load \"lib/x.star\": ...") and replaces the
// interpreter's "cannot load ...: " wrapping in the *Error.
type loadError struct {
	module string
	msg    string
	err    error
}

func (e *loadError) Error() string { return fmt.Sprintf("load %q: %s", e.module, e.msg) }
func (e *loadError) Unwrap() error { return e.err }

// builtinFile is the file name starlark-go gives the frames of built-ins.
const builtinFile = "<builtin>"

// backtraceFrames is how many frames a backtrace keeps at each end of a deep
// stack; the middle of a runaway recursion says nothing new.
const backtraceFrames = 20

// scriptError converts an error from compiling or running a script into an
// *Error, leaving other errors alone. An *Error already in the chain (from a
// file that load() executed) is returned as it is: it is the innermost one.
func scriptError(err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		e := &Error{Pos: innermost(ee.CallStack), Msg: ee.Msg, cause: err}
		var le *loadError
		if errors.As(ee, &le) {
			e.Msg = le.Error()
		}
		e.Backtrace = backtrace(ee.CallStack, e.Msg)
		return e
	}
	var synErr syntax.Error
	if errors.As(err, &synErr) {
		return &Error{Pos: synErr.Pos, Msg: synErr.Msg, cause: err}
	}
	var resErrs resolve.ErrorList
	if errors.As(err, &resErrs) && len(resErrs) > 0 {
		e := &Error{Pos: resErrs[0].Pos, Msg: resErrs[0].Msg, cause: err}
		if len(resErrs) > 1 {
			var b strings.Builder
			for _, re := range resErrs {
				fmt.Fprintf(&b, "%s: %s\n", re.Pos, re.Msg)
			}
			e.Backtrace = strings.TrimSuffix(b.String(), "\n")
		}
		return e
	}
	return err
}

// errorPos returns the script position an error happened at, if known.
func errorPos(err error) syntax.Position {
	var se *Error
	if errors.As(err, &se) {
		return se.Pos
	}
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return innermost(ee.CallStack)
	}
	return syntax.Position{}
}

// innermost returns the position of the innermost frame that is script code,
// not a built-in: where in the script the error happened.
func innermost(stack starlark.CallStack) syntax.Position {
	for i := len(stack) - 1; i >= 0; i-- {
		if p := stack[i].Pos; p.IsValid() && p.Filename() != builtinFile {
			return p
		}
	}
	return syntax.Position{}
}

// backtrace formats a call stack like starlark.EvalError.Backtrace, eliding
// the middle of very deep stacks so that an error stays readable (and fits in
// a status condition).
func backtrace(stack starlark.CallStack, msg string) string {
	suffix := ""
	if n := len(stack); n > 0 && stack[n-1].Pos.Filename() == builtinFile {
		suffix = " in " + stack[n-1].Name
		stack = stack[:n-1]
	}
	var b strings.Builder
	if len(stack) > 0 {
		b.WriteString("Traceback (most recent call last):\n")
	}
	elide := len(stack) > 2*backtraceFrames+1
	for i, fr := range stack {
		if elide && i >= backtraceFrames && i < len(stack)-backtraceFrames {
			if i == backtraceFrames {
				fmt.Fprintf(&b, "  ... %d frames elided ...\n", len(stack)-2*backtraceFrames)
			}
			continue
		}
		fmt.Fprintf(&b, "  %s: in %s\n", fr.Pos, fr.Name)
	}
	fmt.Fprintf(&b, "Error%s: %s", suffix, msg)
	return b.String()
}
