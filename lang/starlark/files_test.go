package starlark

import (
	"context"
	"testing"
)

func TestResolvePath(t *testing.T) {
	if _, _, _, err := ResolvePath(context.Background(), "x"); err == nil {
		t.Error("no files: no error")
	}
	ctx := WithFiles(context.Background(), memFiles{}, "app")
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
		_, source, clean, err := ResolvePath(ctx, tc.in)
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
