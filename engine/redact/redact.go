// Package redact masks Secret values in messages. Every message that leaves
// an evaluation or an apply (errors, conditions, events, log lines, the
// CLI's output and reports) passes one Redactor that knows every Secret
// value the evaluation read or produced (DESIGN.md §8, safety), so that a
// script error quoting a password, or an API server error quoting a field,
// never shows the value.
//
// A Redactor knows a Secret's values as they are written (data as base64,
// stringData as text), decoded (data), and in the quoted forms that error
// messages print them in (Go and Starlark repr, JSON). It masks each with
// "***", the longest first, so a value holding another is masked whole.
//
// Like the engine, it must not import client-go, controller-runtime or
// net/http.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Mask replaces every Secret value in messages.
const Mask = "***"

// MinLen is the length below which a value is not masked: masking every
// "1" or "ok" would garble messages without hiding anything worth hiding.
const MinLen = 3

// Redactor masks the Secret values it was given. The zero value and nil
// mask nothing. It is safe for concurrent use.
type Redactor struct {
	mu     sync.Mutex
	values map[string]struct{}
	repl   *strings.Replacer // built on first use after a change
	// decoded are the base64 data values whose decoded form is added:
	// a fan-out adds the same Secret once per target.
	decoded map[string]struct{}
}

// New returns a Redactor that knows the given values (each as written,
// and in its quoted forms).
func New(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add adds values to mask, each also in the forms messages quote it in.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		r.add(v)
	}
}

func (r *Redactor) add(v string) {
	if len(v) < MinLen {
		return
	}
	if _, ok := r.values[v]; ok {
		return // and so are its forms
	}
	if r.values == nil {
		r.values = map[string]struct{}{}
	}
	for _, form := range forms(v) {
		if len(form) < MinLen {
			continue
		}
		if _, ok := r.values[form]; !ok {
			r.values[form] = struct{}{}
			r.repl = nil
		}
	}
}

// forms are v and the ways messages print it: Go's and Starlark's
// quoting (which escape newlines, quotes and non-printable bytes), JSON's,
// and each line of a multi-line value on its own (YAML block scalars and
// line-wrapped messages show them so).
func forms(v string) []string {
	out := []string{v}
	if q := strconv.Quote(v); q[1:len(q)-1] != v {
		out = append(out, q[1:len(q)-1])
	}
	if q := strconv.QuoteToASCII(v); q[1:len(q)-1] != v {
		out = append(out, q[1:len(q)-1])
	}
	if b, err := json.Marshal(v); err == nil && string(b[1:len(b)-1]) != v {
		out = append(out, string(b[1:len(b)-1]))
	}
	if strings.Contains(v, "\n") {
		for line := range strings.SplitSeq(v, "\n") {
			if line = strings.TrimSpace(line); len(line) >= MinLen {
				out = append(out, line)
			}
		}
	}
	return out
}

// AddObject adds the values of obj when it is a Secret: data as written
// (base64) and decoded, and stringData as written and base64-encoded (as
// the API server, and the operator's apply, keep it in data). Other
// objects add nothing.
func (r *Redactor) AddObject(obj map[string]any) {
	if !IsSecret(obj) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, field := range []string{"data", "stringData"} {
		m, _ := obj[field].(map[string]any)
		for _, v := range m {
			s, ok := v.(string)
			if !ok {
				continue
			}
			r.add(s)
			if field == "stringData" {
				// The operator applies stringData merged into data,
				// as the API server stores it.
				r.add(base64.StdEncoding.EncodeToString([]byte(s)))
				continue
			}
			if _, decoded := r.decoded[s]; decoded {
				continue // the same Secret in another target
			}
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				r.add(string(b))
			}
			if r.decoded == nil {
				r.decoded = map[string]struct{}{}
			}
			r.decoded[s] = struct{}{}
		}
	}
}

// IsSecret tells whether obj is a core/v1 Secret.
func IsSecret(obj map[string]any) bool {
	return obj["kind"] == "Secret" && obj["apiVersion"] == "v1"
}

// Merge adds every value o knows.
func (r *Redactor) Merge(o *Redactor) {
	if o == nil || o == r {
		return
	}
	r.Add(o.Values()...)
}

// Values are the values r masks, in their every form, sorted; for handing
// a Redactor across a process boundary (New(Values()...) masks the same).
func (r *Redactor) Values() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.values))
	for v := range r.values {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// Empty tells whether r masks nothing.
func (r *Redactor) Empty() bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.values) == 0
}

// String returns s with every known value masked.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	repl := r.replacer()
	if repl == nil {
		return s
	}
	return repl.Replace(s)
}

func (r *Redactor) replacer() *strings.Replacer {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.values) == 0 {
		return nil
	}
	if r.repl == nil {
		vals := make([]string, 0, len(r.values))
		for v := range r.values {
			vals = append(vals, v)
		}
		// The longest first: at one position the replacer takes the
		// first of its arguments that matches.
		slices.SortFunc(vals, func(a, b string) int {
			if len(a) != len(b) {
				return len(b) - len(a)
			}
			return strings.Compare(a, b)
		})
		args := make([]string, 0, 2*len(vals))
		for _, v := range vals {
			args = append(args, v, Mask)
		}
		r.repl = strings.NewReplacer(args...)
	}
	return r.repl
}

// Error returns err with its message masked; errors.Is and errors.As still
// see err's causes. A nil err, or one whose message holds no value, is
// returned as it is.
func (r *Redactor) Error(err error) error {
	if err == nil || r == nil {
		return err
	}
	msg := err.Error()
	masked := r.String(msg)
	if masked == msg {
		return err
	}
	return &Error{msg: masked, err: err}
}

// Error is an error whose message was masked. Its causes stay reachable
// for errors.As; code that prints a cause's message itself must mask it
// again.
type Error struct {
	msg string
	err error
}

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return e.err }

// Object returns obj for showing to a person: a Secret with every value of
// data and stringData replaced by Mask, any other object with every string
// that holds a known value masked. obj is not modified; what needs no
// change is shared with it.
func (r *Redactor) Object(obj map[string]any) map[string]any {
	if r.Empty() && !IsSecret(obj) {
		return obj
	}
	if IsSecret(obj) {
		out := maps.Clone(obj)
		for _, field := range []string{"data", "stringData"} {
			m, ok := obj[field].(map[string]any)
			if !ok {
				continue
			}
			masked := make(map[string]any, len(m))
			for k := range m {
				masked[k] = Mask
			}
			out[field] = masked
		}
		obj = out
	}
	masked, _ := r.value(obj)
	return masked.(map[string]any)
}

// value masks the strings of a JSON-shaped value, copying only the maps
// and lists on the way to a string it changes; changed says whether it did.
func (r *Redactor) value(v any) (out any, changed bool) {
	switch v := v.(type) {
	case string:
		m := r.String(v)
		return m, m != v
	case map[string]any:
		var copied map[string]any
		for k, e := range v {
			m, ch := r.value(e)
			if !ch {
				continue
			}
			if copied == nil {
				copied = maps.Clone(v)
			}
			copied[k] = m
		}
		if copied == nil {
			return v, false
		}
		return copied, true
	case []any:
		var copied []any
		for i, e := range v {
			m, ch := r.value(e)
			if !ch {
				continue
			}
			if copied == nil {
				copied = slices.Clone(v)
			}
			copied[i] = m
		}
		if copied == nil {
			return v, false
		}
		return copied, true
	}
	return v, false
}
