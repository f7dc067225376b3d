package starlark

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"testing"

	"go.starlark.net/starlark"
)

// memFiles is an in-memory Files: "source/path" -> text.
type memFiles map[string]string

func (m memFiles) ReadFile(source, p string) ([]byte, error) {
	if p != path.Clean(p) || path.IsAbs(p) {
		return nil, fmt.Errorf("unclean path %q", p)
	}
	s, ok := m[source+"/"+p]
	if !ok {
		return nil, fmt.Errorf("read %s/%s: %w", source, p, fs.ErrNotExist)
	}
	return []byte(s), nil
}

// errorString returns err's message, or "<nil>".
func errorString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func mustLoad(t testing.TB, in *Interpreter, files Files, script Script) *Module {
	t.Helper()
	m, err := in.Load(t.Context(), files, script)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m
}

func mustValue(t testing.TB, v any) starlark.Value {
	t.Helper()
	sv, err := ToValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
