package cue

import (
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	got, err := Format("t.cue", []byte("package x\nimport \"strings\"\na: {b:   1\n// c\nc: strings.ToUpper(\"x\")}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "package x\n\nimport \"strings\"\n\na: {b: 1\n\t// c\n\tc: strings.ToUpper(\"x\")\n}\n"
	if string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if _, err := Format("t.cue", []byte("a: {\nb: 1\n")); err == nil || !strings.HasPrefix(err.Error(), "t.cue:2:6: ") {
		t.Fatalf("got %v, want an error at t.cue:2:6", err)
	}
}
