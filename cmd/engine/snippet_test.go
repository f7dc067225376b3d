package main

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestSnippetColor checks the snippet on a terminal: the gutter dimmed,
// the caret bold red, every sequence reset; and plain text otherwise.
func TestSnippetColor(t *testing.T) {
	pos := filePos{File: "app/main.star", Line: 2, Col: 9}
	var b bytes.Buffer
	renderSnippet(&b, pos, "    n = ctx.x", "    n = ", true)
	want := "\x1b[2m  --> app/main.star:2:9\x1b[0m\n" +
		"\x1b[2m  |\x1b[0m\n" +
		"\x1b[2m2 |\x1b[0m     n = ctx.x\n" +
		"\x1b[2m  |\x1b[0m         \x1b[1;31m^\x1b[0m\n"
	if b.String() != want {
		t.Errorf("colour:\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	renderSnippet(&b, pos, "    n = ctx.x", "    n = ", false)
	if strings.Contains(b.String(), "\x1b") || !strings.HasSuffix(b.String(), "  |         ^\n") {
		t.Errorf("plain:\n%q", b.String())
	}
}

// TestColorOn checks that only a terminal gets colour, and never with
// NO_COLOR set.
func TestColorOn(t *testing.T) {
	if colorOn(&bytes.Buffer{}) {
		t.Error("a buffer gets colour")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if colorOn(f) {
		t.Error("a file gets colour")
	}
	for _, c := range []struct {
		terminal bool
		noColor  string
		want     bool
	}{{true, "", true}, {true, "1", false}, {false, "", false}} {
		if got := useColor(c.terminal, c.noColor); got != c.want {
			t.Errorf("terminal %v, NO_COLOR %q: colour %v, want %v", c.terminal, c.noColor, got, c.want)
		}
	}
}

// TestMaskValue checks what a line of a Secret manifest keeps: its key,
// never its value.
func TestMaskValue(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"  password: hunter2", "  password: ***"},
		{"  password: [hunter2", "  password: ***"},
		{"  .dockerconfigjson: e30=", "  .dockerconfigjson: ***"},
		{"kind: Secret", "kind: Secret"},
		{"  name: db", "  name: db"},
		{"stringData:", "stringData:"},
		{"  - hunter2", "  - ***"},
		{"    continued line of a block scalar", "    ***"},
		{"", ""},
	} {
		if got := maskValue(c.in); got != c.want {
			t.Errorf("maskValue(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestPositions checks which places of a message count: names of files
// of the tree only, in message order, each once, and yaml.v3's parser
// errors a line further down.
func TestPositions(t *testing.T) {
	tr := &tree{files: map[string][]byte{"sync.yaml": nil, "app/main.star": nil, "app/x.yaml": nil}}
	msg := `sync.yaml:11: target "dev": app/main.star:2:19: image nginx:1 (builtin:k8s/x.cue:3:4) app/main.star:2:19 app/x.yaml: yaml: line 4: did not find expected key; app/x.yaml: yaml: line 7: mapping values`
	want := []filePos{{"sync.yaml", 11, 0}, {"app/main.star", 2, 19}, {"app/x.yaml", 5, 0}, {"app/x.yaml", 7, 0}}
	if got := tr.positions(msg); !slices.Equal(got, want) {
		t.Errorf("positions:\n%v\nwant\n%v", got, want)
	}
}
