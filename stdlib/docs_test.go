package stdlib

import (
	"strings"
	"testing"

	"github.com/bazelbuild/buildtools/build"
)

// TestStubs: every stub file parses (as the Python-like syntax language
// servers read), and declares each function of its module with its
// paragraph as the docstring, and each constant.
func TestStubs(t *testing.T) {
	stubs := Stubs()
	for _, m := range Modules() {
		name := m.Name + ".py"
		if len(m.Funcs) == 1 && m.Funcs[0].Name == m.Name {
			name = StubInit
		}
		src, ok := stubs[name]
		if !ok {
			t.Fatalf("no stub file %s for module %s", name, m.Name)
		}
		f, err := build.ParseDefault(name, src)
		if err != nil {
			t.Fatalf("%s does not parse: %v\n%s", name, err, src)
		}
		defs := map[string]string{} // name -> docstring
		for _, s := range f.Stmt {
			switch s := s.(type) {
			case *build.DefStmt:
				if len(s.Body) > 0 {
					if doc, ok := s.Body[0].(*build.StringExpr); ok {
						defs[s.Name] = doc.Value
					}
				}
			case *build.AssignExpr:
				if id, ok := s.LHS.(*build.Ident); ok {
					defs[id.Name] = "constant"
				}
			}
		}
		for _, fn := range m.Funcs {
			doc, ok := defs[fn.Name]
			if !ok {
				t.Errorf("%s: no %s", name, fn.Signature)
				continue
			}
			if doc != "constant" && strings.Join(strings.Fields(doc), " ") != strings.Join(strings.Fields(fn.Doc), " ") {
				t.Errorf("%s: %s: docstring %q, want %q", name, fn.Name, doc, fn.Doc)
			}
		}
	}
	if got := string(stubs["math.py"]); !strings.Contains(got, "\npi = 3.14159") {
		t.Errorf("math.py: no pi constant:\n%s", got)
	}
}

func TestMarkdown(t *testing.T) {
	md := string(Markdown())
	for _, m := range Modules() {
		if !strings.Contains(md, "\n## "+m.Name+"\n") {
			t.Errorf("no section for %s", m.Name)
		}
		for _, f := range m.Funcs {
			if !strings.Contains(md, "```python\n"+f.Signature+"\n```") {
				t.Errorf("no signature %s", f.Signature)
			}
		}
	}
	if got := firstSentence("Hex digests, e.g. for checksums. More."); got != "Hex digests, e.g. for checksums." {
		t.Errorf("firstSentence: %q", got)
	}
}
