package starlark

import (
	"context"
	"strings"
	"testing"

	"go.starlark.net/starlark"
)

// TestResolvePath resolves paths on a thread this package did not start:
// the calling file is not known, so a relative path starts at the root of
// the script's source.
func TestResolvePath(t *testing.T) {
	if _, _, _, err := ResolvePath(&starlark.Thread{}, "x"); err == nil {
		t.Error("no files: no error")
	}
	thread := &starlark.Thread{}
	SetContext(WithFiles(context.Background(), memFiles{}, "app"), thread)
	for _, tc := range []struct{ in, source, clean, err string }{
		{in: "schemas/", source: "app", clean: "schemas"},
		{in: "//schemas", source: "app", clean: "schemas"},
		{in: "", source: "app", clean: "."},
		{in: "@lib//a/b.cue", source: "lib", clean: "a/b.cue"},
		{in: "@lib//", source: "lib", clean: "."},
		{in: "../x", err: `path "../x": path escapes source "app"`},
		{in: "/etc", err: `path "/etc": absolute path not allowed in source "app"`},
		{in: "@//x", err: `path "@//x": want "@source//path"`},
	} {
		_, source, clean, err := ResolvePath(thread, tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: err %v, want %s", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || source != tc.source || clean != tc.clean {
			t.Errorf("%q: got %q %q %v", tc.in, source, clean, err)
		}
	}
}

// TestResolvePathFromCallingFile resolves the paths built-ins are given as
// load() resolves modules: relative to the file whose code calls the
// built-in (the script, a file it loaded, a lambda a built-in calls back),
// in Load and in Call, and never outside the source.
func TestResolvePathFromCallingFile(t *testing.T) {
	resolve := starlark.NewBuiltin("resolve", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		var p string
		if err := starlark.UnpackArgs(b.Name(), args, kwargs, "path", &p); err != nil {
			return nil, err
		}
		_, source, clean, err := ResolvePath(thread, p)
		if err != nil {
			return nil, err
		}
		return starlark.String(source + ":" + clean), nil
	})
	// apply calls its function back, as assert.fails does.
	apply := starlark.NewBuiltin("apply", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
		return starlark.Call(thread, args[0], nil, nil)
	})
	in := New(Options{Predeclared: starlark.StringDict{"resolve": resolve, "apply": apply}})
	files := memFiles{
		"app/test/x_test.star": `
load("../lib/helpers.star", "from_lib")
AT_LOAD = resolve("schemas")
def main():
    return [
        resolve("schemas"),
        resolve("./testdata/dev.yaml"),
        resolve("."),
        resolve("../schemas"),
        resolve("//schemas"),
        resolve("@other//schemas"),
        apply(lambda: resolve("golden")),
        from_lib(),
    ]
def escape():
    return resolve("../../x")
`,
		"app/lib/helpers.star": `
def from_lib():
    return resolve("overlays/prod")
`,
	}
	ctx := WithFiles(t.Context(), files, "app")
	m, err := in.Load(ctx, files, Script{Source: "app", Path: "test/x_test.star"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Globals["AT_LOAD"]; got != starlark.String("app:test/schemas") {
		t.Errorf("at load: %v, want app:test/schemas", got)
	}
	got, err := in.Call(ctx, m, "main")
	if err != nil {
		t.Fatal(err)
	}
	want := `["app:test/schemas", "app:test/testdata/dev.yaml", "app:test", "app:schemas", "app:schemas", "other:schemas", "app:test/golden", "app:lib/overlays/prod"]`
	if got.String() != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	_, err = in.Call(ctx, m, "escape")
	if want := `path "../../x": path escapes source "app"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("escape: %v, want %s", err, want)
	}
}
