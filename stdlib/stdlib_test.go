package stdlib

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	startime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"

	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// fixedNow is the clock of test threads, as the interpreter fixes it.
var fixedNow = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// TestStarFiles runs every testdata/*.star file with Predeclared() as its
// only globals, then calls each of its test_* functions.
func TestStarFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.star"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.star files")
	}
	opts := &syntax.FileOptions{Set: true, While: true, TopLevelControl: true, GlobalReassign: true, Recursion: true}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			thread := newTestThread(t)
			globals, err := starlark.ExecFileOptions(opts, thread, file, src, Predeclared())
			if err != nil {
				t.Fatal(describe(err))
			}
			names := globals.Keys() // sorted
			ran := 0
			for _, name := range names {
				fn, ok := globals[name].(*starlark.Function)
				if !ok || !strings.HasPrefix(name, "test_") {
					continue
				}
				ran++
				t.Run(name, func(t *testing.T) {
					if _, err := starlark.Call(newTestThread(t), fn, nil, nil); err != nil {
						t.Error(describe(err))
					}
				})
			}
			if ran == 0 {
				t.Errorf("%s defines no test_* functions", file)
			}
		})
	}
}

func newTestThread(t *testing.T) *starlark.Thread {
	thread := &starlark.Thread{
		Name:  t.Name(),
		Print: func(_ *starlark.Thread, msg string) { t.Log(msg) },
	}
	startime.SetNow(thread, func() (time.Time, error) { return fixedNow, nil })
	lstar.SetContext(lstar.WithFiles(context.Background(), testFiles(t), "test"), thread)
	return thread
}

// testFiles is the snapshot of source "test": the files under
// testdata/files, which .star tests reach by path ("schemas/app.cue").
func testFiles(t *testing.T) treeFiles {
	t.Helper()
	root := filepath.Join("testdata", "files")
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return treeFiles{"test": files}
}

// treeFiles are source snapshots by name, as the engine gives them.
type treeFiles map[string]map[string][]byte

func (f treeFiles) ReadFile(source, name string) ([]byte, error) {
	if b, ok := f[source][name]; ok {
		return b, nil
	}
	return nil, &fs.PathError{Op: "read", Path: source + "/" + name, Err: fs.ErrNotExist}
}

func (f treeFiles) Tree(source string) (map[string][]byte, error) {
	if t, ok := f[source]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no source %q: %w", source, fs.ErrNotExist)
}

// describe renders an error with its Starlark backtrace (file:line).
func describe(err error) string {
	var evalErr *starlark.EvalError
	if errors.As(err, &evalErr) {
		return evalErr.Backtrace()
	}
	return err.Error()
}

// members lists what scripts can reach through a global: a module's members,
// or the global's own name for a single built-in.
func members(name string, v starlark.Value) []string {
	if m, ok := v.(*starlarkstruct.Module); ok {
		return m.AttrNames()
	}
	return []string{name}
}

func TestModulesDocumentEveryMember(t *testing.T) {
	mods := Modules()
	if !sort.SliceIsSorted(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name }) {
		t.Error("Modules() is not sorted by name")
	}
	for _, m := range mods {
		if m.Doc == "" {
			t.Errorf("module %s has no Doc", m.Name)
		}
		if m.Value == nil {
			t.Errorf("module %s has no Value", m.Name)
			continue
		}
		var documented []string
		for _, f := range m.Funcs {
			documented = append(documented, f.Name)
			if f.Doc == "" || f.Signature == "" {
				t.Errorf("%s.%s lacks a Doc or Signature", m.Name, f.Name)
			}
			if f.Name != m.Name && !strings.HasPrefix(f.Signature, m.Name+"."+f.Name) {
				t.Errorf("%s.%s: signature %q does not start with its name", m.Name, f.Name, f.Signature)
			}
		}
		slices.Sort(documented)
		actual := members(m.Name, m.Value)
		slices.Sort(actual)
		if !slices.Equal(documented, actual) {
			t.Errorf("module %s documents %v, has %v", m.Name, documented, actual)
		}
	}
}

func TestPredeclared(t *testing.T) {
	want := []string{"assert", "base64", "cue", "dr", "hash", "helm", "json", "k8s", "kustomize", "math", "re", "struct", "time", "yaml"}
	if got := Predeclared().Keys(); !slices.Equal(got, want) {
		t.Errorf("Predeclared() = %v, want %v", got, want)
	}
	// Predeclared returns a fresh dict; the values are shared.
	p := Predeclared()
	delete(p, "k8s")
	if _, ok := Predeclared()["k8s"]; !ok {
		t.Error("deleting from one Predeclared() result changed another")
	}
}

// TestErrorsNameFunction calls every built-in with too many arguments and
// checks that the error starts with the built-in's qualified name.
func TestErrorsNameFunction(t *testing.T) {
	thread := newTestThread(t)
	tooMany := make(starlark.Tuple, 12)
	for i := range tooMany {
		tooMany[i] = starlark.MakeInt(i)
	}
	for name, v := range Predeclared() {
		for _, member := range members(name, v) {
			qualified := name + "." + member
			fn := v
			if m, ok := v.(*starlarkstruct.Module); ok {
				fn = m.Members[member]
			} else {
				qualified = name
			}
			b, ok := fn.(*starlark.Builtin)
			if !ok {
				continue // a constant such as math.pi
			}
			if b.Name() != qualified {
				t.Errorf("built-in %s is named %q", qualified, b.Name())
			}
			_, err := starlark.Call(thread, b, tooMany, nil)
			if err == nil {
				t.Errorf("%s accepted 12 arguments", qualified)
				continue
			}
			var evalErr *starlark.EvalError
			msg := err.Error()
			if errors.As(err, &evalErr) {
				msg = evalErr.Msg
			}
			if !strings.HasPrefix(msg, qualified+": ") {
				t.Errorf("%s: error %q does not start with %q", qualified, msg, qualified+": ")
			}
		}
	}
}

func TestGuardRecoversPanic(t *testing.T) {
	b := newBuiltin("x.boom", func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
		var m map[string]int
		m["a"] = 1 //nolint:staticcheck // panics on purpose: assignment to nil map
		return starlark.None, nil
	})
	_, err := starlark.Call(newTestThread(t), b, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "x.boom: internal error: assignment to entry in nil map") {
		t.Errorf("got %v, want an internal error naming x.boom", err)
	}
}

// TestImports checks DESIGN.md §1 for this package's own imports: no cluster
// client, no HTTP, no engine.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"net/http", "k8s.io/client-go", "sigs.k8s.io/controller-runtime", "github.com/manifestsync/manifestsync/engine"}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s", file, path)
				}
			}
		}
	}
}

// TestConcurrentUse runs scripts on several threads at once over the same
// Predeclared values, as the engine does for targets (run it with -race).
func TestConcurrentUse(t *testing.T) {
	const src = `
obj = k8s.object("apps/v1", "Deployment", "web", spec = {"template": {"spec": {"containers": [{"name": "a"}]}}})
out = k8s.strategic_merge(obj, {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}})
ok = re.fullmatch("w.b", k8s.name(out)) and yaml.decode(yaml.encode(out)) == out
`
	globals := Predeclared()
	errs := make(chan error, 8)
	for i := range cap(errs) {
		go func() {
			thread := &starlark.Thread{Name: fmt.Sprint(i)}
			g, err := starlark.ExecFileOptions(&syntax.FileOptions{}, thread, "c.star", src, globals)
			if err == nil && g["ok"] != starlark.True {
				err = fmt.Errorf("thread %d: ok = %v", i, g["ok"])
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(describe(err))
		}
	}
}
