package starlark

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// loadFiles is a small tree of two sources for the load() tests.
var loadFiles = memFiles{
	"app/transform.star":  "load('lib/labels.star', 'labels')\nresult = labels\n",
	"app/lib/labels.star": "load('sub/x.star', 'x')\nload('//lib/y.star', 'y')\nlabels = {'x': x, 'y': y}\n",
	"app/lib/sub/x.star":  "load('../y.star', 'y')\nx = 'x' + y\n",
	"app/lib/y.star":      "y = 'y'\n",
	"app/lib/data.json":   "{}\n",
	"app/cycle/a.star":    "load('b.star', 'b')\na = 1\n",
	"app/cycle/b.star":    "\nload('a.star', 'a')\nb = 1\n",
	"app/self.star":       "load('self.star', 's')\ns = 1\n",
	"other/lib/x.star":    "load('y.star', 'y')\nx = 'other-' + y\n",
	"other/lib/y.star":    "y = 'other-y'\n",
}

func TestLoadResolution(t *testing.T) {
	tests := []struct {
		name   string
		script string // inline text, run as app/<inline>
		want   string // repr of global "result"
		err    string // error message, when it must fail
	}{
		{name: "relative", script: "load('lib/sub/x.star', 'x')\nresult = x", want: `"xy"`},
		{name: "relative with dots", script: "load('./lib/../lib/y.star', 'y')\nresult = y", want: `"y"`},
		{name: "nested relative and root", script: "load('lib/labels.star', 'labels')\nresult = labels", want: `{"x": "xy", "y": "y"}`},
		{name: "source root", script: "load('//lib/y.star', 'y')\nresult = y", want: `"y"`},
		{name: "other source", script: "load('@other//lib/x.star', 'x')\nresult = x", want: `"other-other-y"`},
		{name: "same source by name", script: "load('@app//lib/y.star', 'y')\nresult = y", want: `"y"`},
		{
			name:   "escape",
			script: "load('../../etc/passwd', 'x')",
			err:    `<inline>:1:1: load "../../etc/passwd": path escapes source "app"`,
		},
		{
			name:   "escape after cleaning",
			script: "load('lib/../../x.star', 'x')",
			err:    `<inline>:1:1: load "lib/../../x.star": path escapes source "app"`,
		},
		{
			name:   "escape from root",
			script: "load('//../other/lib/x.star', 'x')",
			err:    `<inline>:1:1: load "//../other/lib/x.star": path escapes source "app"`,
		},
		{
			name:   "escape other source",
			script: "load('@other//../app/lib/y.star', 'y')",
			err:    `<inline>:1:1: load "@other//../app/lib/y.star": path escapes source "other"`,
		},
		{
			name:   "absolute",
			script: "load('/etc/passwd.star', 'x')",
			err:    `<inline>:1:1: load "/etc/passwd.star": absolute paths are not allowed`,
		},
		{
			name:   "absolute in other source",
			script: "load('@other///etc/x.star', 'x')",
			err:    `<inline>:1:1: load "@other///etc/x.star": absolute path not allowed in source "other"`,
		},
		{
			name:   "missing",
			script: "\nload('lib/nope.star', 'x')",
			err:    `<inline>:2:1: load "lib/nope.star": file not found in source "app"`,
		},
		{
			name:   "missing source",
			script: "load('@nope//x.star', 'x')",
			err:    `<inline>:1:1: load "@nope//x.star": file not found in source "nope"`,
		},
		{
			name:   "bad source syntax",
			script: "load('@other/x.star', 'x')",
			err:    `<inline>:1:1: load "@other/x.star": want "@source//path"`,
		},
		{
			name:   "not star",
			script: "load('lib/data.json', 'x')",
			err:    `<inline>:1:1: load "lib/data.json": only .star files can be loaded`,
		},
		{
			name:   "cycle",
			script: "load('cycle/a.star', 'a')",
			err:    `app/cycle/b.star:2:1: load "a.star": load cycle: app/cycle/a.star -> app/cycle/b.star -> app/cycle/a.star`,
		},
		{
			name:   "self cycle",
			script: "load('self.star', 's')",
			err:    `app/self.star:1:1: load "self.star": load cycle: app/self.star -> app/self.star`,
		},
		{
			name:   "missing name",
			script: "load('lib/y.star', 'z')",
			err:    `<inline>:1:1: load: name z not found in module lib/y.star`,
		},
	}
	in := New(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := in.Load(t.Context(), loadFiles, Script{Source: "app", Inline: []byte(tt.script)})
			if tt.err != "" {
				if errorString(err) != tt.err {
					t.Fatalf("got error\n\t%s\nwant\n\t%s", errorString(err), tt.err)
				}
				var se *Error
				if !errors.As(err, &se) {
					t.Fatalf("got %T, want *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Globals["result"].String(); got != tt.want {
				t.Errorf("result = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLoadFromFile(t *testing.T) {
	in := New(Options{})
	m := mustLoad(t, in, loadFiles, Script{Source: "app", Path: "transform.star"})
	if got, want := m.Globals["result"].String(), `{"x": "xy", "y": "y"}`; got != want {
		t.Errorf("result = %s, want %s", got, want)
	}
	var got []string
	for _, f := range m.Files {
		got = append(got, f.Source+"/"+f.Path)
	}
	want := "app/transform.star app/lib/labels.star app/lib/sub/x.star app/lib/y.star"
	if strings.Join(got, " ") != want {
		t.Errorf("Files = %v, want %s", got, want)
	}
}

func TestLoadScriptErrors(t *testing.T) {
	in := New(Options{})
	tests := []struct {
		script Script
		err    string
	}{
		{Script{Source: "app", Path: "nope.star"}, `script "nope.star": file not found in source "app"`},
		{Script{Source: "app", Path: "../x.star"}, `script "../x.star": path escapes source "app"`},
		{Script{Source: "app", Path: "/x.star"}, `script "/x.star": absolute path not allowed in source "app"`},
		{Script{Path: "x.star"}, `script "x.star": no source`},
		{Script{Inline: []byte("load('x.star', 'x')")}, `<inline>:1:1: load "x.star": no source to load from (use "@source//path")`},
	}
	for _, tt := range tests {
		_, err := in.Load(t.Context(), loadFiles, tt.script)
		if !strings.HasPrefix(errorString(err), tt.err) {
			t.Errorf("%+v: got error %q, want %q", tt.script, errorString(err), tt.err)
		}
	}
	_, err := in.Load(t.Context(), loadFiles, Script{Source: "app", Path: "nope.star"})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing script: %v does not wrap fs.ErrNotExist", err)
	}
}

// TestLoadOnce checks that a file loaded by several files runs once per Load.
func TestLoadOnce(t *testing.T) {
	files := memFiles{
		"app/a.star":      "load('common.star', 'c')\na = c",
		"app/b.star":      "load('common.star', 'c')\nb = c",
		"app/common.star": "print('exec')\nc = [1]",
	}
	var prints []string
	in := New(Options{Print: func(_ *starlark.Thread, msg string) { prints = append(prints, msg) }})
	m := mustLoad(t, in, files, Script{Source: "app", Inline: []byte(
		"load('a.star', 'a')\nload('b.star', 'b')\nload('common.star', 'c')\nsame = a == b and a == c")})
	if len(prints) != 1 {
		t.Errorf("common.star executed %d times, want 1", len(prints))
	}
	if m.Globals["same"].String() != "True" {
		t.Errorf("loads of one file did not share its globals")
	}
	if n := len(m.Files); n != 4 {
		t.Errorf("Files has %d entries, want 4: %v", n, m.Files)
	}
	mustLoad(t, in, files, Script{Source: "app", Path: "a.star"})
	if len(prints) != 2 {
		t.Errorf("a second Load did not execute common.star again (%d prints)", len(prints))
	}
}

// TestLoadedModulesFrozen checks that a script cannot mutate what it loaded.
func TestLoadedModulesFrozen(t *testing.T) {
	files := memFiles{"app/lib.star": "l = [1]"}
	_, err := New(Options{}).Load(t.Context(), files, Script{Source: "app", Inline: []byte("load('lib.star', 'l')\nl.append(2)")})
	if want := "<inline>:2:9: append: cannot append to frozen list"; errorString(err) != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestLoadedFilesSeePredeclared(t *testing.T) {
	files := memFiles{"app/lib.star": "v = answer + 1"}
	in := New(Options{Predeclared: starlark.StringDict{"answer": mustValue(t, 41)}})
	m := mustLoad(t, in, files, Script{Source: "app", Inline: []byte("load('lib.star', 'v')\nresult = v")})
	if got := m.Globals["result"].String(); got != "42" {
		t.Errorf("result = %s, want 42", got)
	}
}
