package main

import (
	"strings"
	"testing"
)

// A directory given to engine eval as an argument, as a new user may try,
// is refused with exit 2 naming -f, not as an unknown command.
func TestEvalPositionalArgument(t *testing.T) {
	code, stdout, stderr := runIn(t, t.TempDir(), "eval", "examples/starlark-app")
	if code != 2 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want 2 and nothing", code, stdout)
	}
	if !strings.Contains(stderr, `eval: takes no arguments, got "examples/starlark-app"`) || !strings.Contains(stderr, "-f") {
		t.Errorf("stderr %q: want the argument named and -f", stderr)
	}
}
