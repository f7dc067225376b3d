package starlark

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Limits bound one evaluation. A zero (or negative) field takes its default,
// never "unlimited": an operator must not be taken down by one bad script.
type Limits struct {
	MaxSteps   uint64        // Starlark execution steps per call; default 100_000_000
	Timeout    time.Duration // wall clock per Load or Call; default 10s
	MaxObjects int           // objects a transform may return; default 10_000
	MaxBytes   int64         // total JSON-encoded size of the returned objects; default 64 MiB

	// MaxDepth bounds the call stack (Starlark functions, built-ins and
	// loaded modules' top levels); default 10_000. Deep recursion costs Go
	// stack, about 2.5 KiB a call, so this keeps a runaway `def f(): f()`
	// near 25 MiB instead of the quarter gigabyte starlark-go's own guard
	// (100_000 frames) allows.
	MaxDepth int
}

// Default limits; see Limits.
const (
	DefaultMaxSteps   = 100_000_000
	DefaultTimeout    = 10 * time.Second
	DefaultMaxObjects = 10_000
	DefaultMaxBytes   = 64 << 20
	DefaultMaxDepth   = 10_000
)

// DefaultLimits returns the limits used when none are configured.
func DefaultLimits() Limits {
	return Limits{
		MaxSteps:   DefaultMaxSteps,
		Timeout:    DefaultTimeout,
		MaxObjects: DefaultMaxObjects,
		MaxBytes:   DefaultMaxBytes,
		MaxDepth:   DefaultMaxDepth,
	}
}

// WithDefaults returns l with every zero or negative field set to its default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxSteps == 0 {
		l.MaxSteps = d.MaxSteps
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = d.MaxObjects
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	return l
}

// Names of the limits, as found in LimitError.Limit.
const (
	LimitSteps   = "steps"
	LimitTimeout = "timeout"
	LimitObjects = "objects"
	LimitBytes   = "bytes"
	LimitDepth   = "depth"
)

// LimitError says which limit ended an evaluation.
type LimitError struct {
	Limit string          // LimitSteps, LimitTimeout, LimitObjects, LimitBytes or LimitDepth
	Value string          // the configured limit, e.g. "100000000", "10s", or "context deadline"
	Pos   syntax.Position // where the script was when it stopped, if known

	// Err is the underlying cause, if any: context.DeadlineExceeded for a
	// timeout, so that errors.Is(err, context.DeadlineExceeded) holds.
	Err error
}

// Error returns the position (when known) and which limit was exceeded,
// e.g. "app/transform.star:3:5: step limit of 100000000 exceeded".
func (e *LimitError) Error() string {
	var msg string
	switch e.Limit {
	case LimitSteps:
		msg = "step limit of " + e.Value + " exceeded"
	case LimitTimeout:
		if e.Value == valueContextDeadline {
			msg = "evaluation timed out (context deadline exceeded)"
		} else {
			msg = "timeout of " + e.Value + " exceeded"
		}
	case LimitObjects:
		msg = "object limit of " + e.Value + " exceeded"
	case LimitBytes:
		msg = "size limit of " + e.Value + " bytes exceeded"
	case LimitDepth:
		msg = "call depth limit of " + e.Value + " exceeded"
	default:
		msg = e.Limit + " limit of " + e.Value + " exceeded"
	}
	if e.Pos.IsValid() {
		return e.Pos.String() + ": " + msg
	}
	return msg
}

// Unwrap returns the underlying cause, if any.
func (e *LimitError) Unwrap() error { return e.Err }

// valueContextDeadline is LimitError.Value when the caller's context deadline,
// not Limits.Timeout, ended the evaluation.
const valueContextDeadline = "context deadline"

// resultName prefixes the errors of Objects: transforms return their objects
// from main().
const resultName = "main() result"

// ErrNoneResult is the error of a transform whose main returned None,
// usually by falling off its end: an empty output must be said with [].
var ErrNoneResult = errors.New("main() returned None; return a list of objects")

// Objects converts a transform's return value into objects: a list (or tuple)
// of dicts; None is ErrNoneResult. Each element must be a dict with string keys
// whose values convert with FromValue. It enforces MaxObjects and MaxBytes (the
// sum of the objects' JSON encodings) and says which element is wrong:
// "main() result [3]: got int, want dict".
func (l Limits) Objects(v starlark.Value) ([]map[string]any, error) {
	l = l.WithDefaults()
	var elems starlark.Indexable
	switch v := v.(type) {
	case starlark.NoneType:
		return nil, ErrNoneResult
	case *starlark.List:
		elems = v
	case starlark.Tuple:
		elems = v
	default:
		return nil, fmt.Errorf("%s: got %s, want list of dicts", resultName, v.Type())
	}
	n := elems.Len()
	if n > l.MaxObjects {
		return nil, fmt.Errorf("%s: %d objects: %w", resultName, n,
			&LimitError{Limit: LimitObjects, Value: strconv.Itoa(l.MaxObjects)})
	}
	// Results are converted straight away while they are small. Once
	// eagerBytes have been converted (or one element alone needs more), the
	// rest is measured first: a lower bound of its JSON size, found without
	// expanding shared values, rejects an oversized result before the
	// conversion spends the whole budget expanding it.
	objs := make([]map[string]any, 0, n)
	var total int64
	measured := false
	for i := 0; i < n; i++ {
		d, ok := elems.Index(i).(*starlark.Dict)
		if !ok {
			return nil, fmt.Errorf("%s [%d]: got %s, want dict", resultName, i, elems.Index(i).Type())
		}
		if !measured && total > eagerBytes {
			if err := l.measureRest(elems, i, total); err != nil {
				return nil, err
			}
			measured = true
		}
		// Every value costs at least one byte of JSON: the remaining
		// byte budget bounds the conversion's work.
		budget := l.MaxBytes - total
		if !measured {
			budget = min(budget, eagerBytes+1-total)
		}
		c := converter{budget: budget}
		obj, err := c.fromValue(d, 0)
		if err != nil && c.exhausted && !measured && budget < l.MaxBytes-total {
			// Too big to convert unmeasured: measure, then convert again.
			if err := l.measureRest(elems, i, total); err != nil {
				return nil, err
			}
			measured = true
			c = converter{budget: l.MaxBytes - total}
			obj, err = c.fromValue(d, 0)
		}
		if err != nil {
			if c.exhausted {
				err = l.bytesError()
			}
			return nil, fmt.Errorf("%s [%d]: %w", resultName, i, err)
		}
		total += c.size
		if total > l.MaxBytes {
			return nil, fmt.Errorf("%s [%d]: %w", resultName, i, l.bytesError())
		}
		objs = append(objs, obj.(map[string]any))
	}
	return objs, nil
}

// eagerBytes is how much of a result Objects converts before it measures
// the rest: a transform's usual output, a few objects of a few KiB each,
// is converted in one pass.
const eagerBytes = 1 << 20

// measureRest checks that the elements from i on, measured without
// expanding shared values, fit in what is left of MaxBytes after done.
func (l Limits) measureRest(elems starlark.Indexable, i int, done int64) error {
	var m measurer
	size := done
	for ; i < elems.Len(); i++ {
		size = satAdd(size, m.measure(elems.Index(i), 0).bytes)
		if size > l.MaxBytes {
			return fmt.Errorf("%s [%d]: %w", resultName, i, l.bytesError())
		}
	}
	return nil
}

func (l Limits) bytesError() *LimitError {
	return &LimitError{Limit: LimitBytes, Value: strconv.FormatInt(l.MaxBytes, 10)}
}
