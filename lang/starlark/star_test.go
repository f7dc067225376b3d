package starlark

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	startime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// assertModule is the assert module of the .star tests: eq(got, want),
// true(cond), fails(fn, substring).
var assertModule = &starlarkstruct.Module{Name: "assert", Members: starlark.StringDict{
	"eq": starlark.NewBuiltin("assert.eq", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var got, want starlark.Value
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 2, &got, &want); err != nil {
			return nil, err
		}
		if eq, err := starlark.Equal(got, want); err != nil || !eq {
			return nil, fmt.Errorf("got %s, want %s", got, want)
		}
		return starlark.None, nil
	}),
	"true": starlark.NewBuiltin("assert.true", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var cond starlark.Value
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &cond); err != nil {
			return nil, err
		}
		if !cond.Truth() {
			return nil, fmt.Errorf("not true: %s", cond)
		}
		return starlark.None, nil
	}),
	"fails": starlark.NewBuiltin("assert.fails", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var fn starlark.Callable
		var substr string
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kwargs, 2, &fn, &substr); err != nil {
			return nil, err
		}
		_, err := starlark.Call(thread, fn, nil, nil)
		if err == nil {
			return nil, fmt.Errorf("%s did not fail", fn.Name())
		}
		if !strings.Contains(err.Error(), substr) {
			return nil, fmt.Errorf("error %q does not contain %q", err, substr)
		}
		return starlark.None, nil
	}),
}}

// TestStarFiles runs every testdata/*.star file as a script of source
// "test" (testdata is its root) and calls each of its test_* functions.
func TestStarFiles(t *testing.T) {
	files := memFiles{}
	err := filepath.WalkDir("testdata", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel("testdata", p)
		files["test/"+filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	in := New(Options{Predeclared: starlark.StringDict{"assert": assertModule, "time": startime.Module}})
	scripts, _ := filepath.Glob("testdata/*.star")
	for _, script := range scripts {
		t.Run(filepath.Base(script), func(t *testing.T) {
			m := mustLoad(t, in, files, Script{Source: "test", Path: filepath.Base(script)})
			var tests []string
			for name := range m.Globals {
				if strings.HasPrefix(name, "test_") {
					tests = append(tests, name)
				}
			}
			sort.Strings(tests)
			for _, name := range tests {
				if _, err := in.Call(t.Context(), m, name); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}
