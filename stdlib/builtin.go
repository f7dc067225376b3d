package stdlib

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// builtinImpl is the Go implementation of a Starlark built-in.
type builtinImpl = func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)

// newBuiltin returns the built-in name ("k8s.match") implemented by impl,
// guarded so that a panic becomes an error and every error names it.
func newBuiltin(name string, impl builtinImpl) *starlark.Builtin {
	return starlark.NewBuiltin(name, guard(name, "", impl))
}

// guard wraps impl so that it reports instead of panicking and so that each
// error it returns starts with "name: ". An error that starts with "alias: "
// (an upstream module's unqualified name, like "floor") is renamed.
func guard(name, alias string, impl builtinImpl) builtinImpl {
	return func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (v starlark.Value, err error) {
		defer func() {
			if r := recover(); r != nil {
				v, err = nil, fmt.Errorf("%s: internal error: %v", name, r)
			}
		}()
		v, err = impl(thread, b, args, kwargs)
		if err != nil {
			return nil, nameError(name, alias, err)
		}
		return v, nil
	}
}

// nameError makes err's message start with "name: ".
func nameError(name, alias string, err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, name+": "):
		return err
	case alias != "" && strings.HasPrefix(msg, alias+": "):
		return &renamedError{msg: name + msg[len(alias):], err: err}
	}
	return fmt.Errorf("%s: %w", name, err)
}

// renamedError is err with its message's leading function name replaced.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// qualify returns a copy of an upstream module (go.starlark.net/lib/...) whose
// built-ins are named after the module ("math.floor" rather than "floor") and
// guarded like ours. Other members, such as math.pi, are shared as they are.
func qualify(m *starlarkstruct.Module) *starlarkstruct.Module {
	members := make(starlark.StringDict, len(m.Members))
	for name, v := range m.Members {
		b, ok := v.(*starlark.Builtin)
		if !ok {
			members[name] = v
			continue
		}
		qualified := m.Name + "." + name
		alias := b.Name()
		if alias == qualified {
			alias = ""
		}
		members[name] = starlark.NewBuiltin(qualified, guard(qualified, alias,
			func(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
				return b.CallInternal(thread, args, kwargs)
			}))
	}
	return &starlarkstruct.Module{Name: m.Name, Members: members}
}

// stringOrBytes is an argument that may be a str or bytes, read as a Go
// string (Starlark strings may hold arbitrary bytes).
type stringOrBytes string

// Unpack implements starlark.Unpacker.
func (s *stringOrBytes) Unpack(v starlark.Value) error {
	switch v := v.(type) {
	case starlark.String:
		*s = stringOrBytes(v)
	case starlark.Bytes:
		*s = stringOrBytes(v)
	default:
		return fmt.Errorf("got %s, want str or bytes", v.Type())
	}
	return nil
}

// toMap converts a dict (or struct) argument into a JSON-shaped Go map; what
// names the argument in errors.
func toMap(what string, v starlark.Value) (map[string]any, error) {
	switch v.(type) {
	case starlark.IterableMapping, *starlarkstruct.Struct:
	default:
		return nil, fmt.Errorf("%s: got %s, want dict", what, v.Type())
	}
	g, err := lstar.FromValue(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	m, ok := g.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: got %s, want dict", what, v.Type())
	}
	return m, nil
}

// toList converts a list or tuple argument into a JSON-shaped Go slice.
func toList(what string, v starlark.Value) ([]any, error) {
	switch v.(type) {
	case *starlark.List, starlark.Tuple:
	default:
		return nil, fmt.Errorf("%s: got %s, want list", what, v.Type())
	}
	g, err := lstar.FromValue(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return g.([]any), nil
}

// toStringMap converts an optional dict of strings (labels, annotations,
// ConfigMap data) into a Go map. None gives a nil map. With allowNone, a None
// value is kept as a nil entry (for deletion); otherwise it is an error.
func toStringMap(what string, v starlark.Value, allowNone bool) (map[string]any, error) {
	if v == nil || v == starlark.None {
		return nil, nil
	}
	m, err := toMap(what, v)
	if err != nil {
		return nil, err
	}
	for _, k := range sortedKeys(m) {
		switch m[k].(type) {
		case string:
		case nil:
			if !allowNone {
				return nil, fmt.Errorf("%s[%q]: got None, want string", what, k)
			}
		default:
			return nil, fmt.Errorf("%s[%q]: got %s, want string", what, k, typeName(m[k]))
		}
	}
	return m, nil
}

// typeName names the Starlark type of a JSON-shaped Go value, for errors.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case string:
		return "string"
	case int64:
		return "int"
	case float64:
		return "float"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

// sortedKeys returns m's keys in order, for deterministic iteration.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
