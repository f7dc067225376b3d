package starlark

import (
	"go.starlark.net/syntax"
)

// Sites are the places in a module's files that build objects, by kind:
// dict literals with a "kind": "K" entry, calls with a kind = "K" keyword,
// k8s.object(api_version, "K", ...), k8s.config_map(...) and
// k8s.secret(...). Starlark values do not remember where they were made,
// so this is how an error about an output object (a schema violation)
// points into the script: at the one place that builds its kind.
type Sites map[string][]syntax.Position

// constructorKinds are the k8s module's constructors of one kind.
var constructorKinds = map[string]string{"config_map": "ConfigMap", "secret": "Secret"}

// findSites walks a file's syntax tree for the places that build objects.
func findSites(f *syntax.File) Sites {
	sites := Sites{}
	add := func(kind string, n syntax.Node) {
		start, _ := n.Span()
		sites[kind] = append(sites[kind], start)
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.DictExpr:
			for _, e := range n.List {
				e := e.(*syntax.DictEntry)
				if stringLiteral(e.Key) == "kind" {
					if k := stringLiteral(e.Value); k != "" {
						add(k, n)
					}
				}
			}
		case *syntax.CallExpr:
			for _, a := range n.Args {
				if b, ok := a.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
					if id, ok := b.X.(*syntax.Ident); ok && id.Name == "kind" {
						if k := stringLiteral(b.Y); k != "" {
							add(k, n)
						}
					}
				}
			}
			if fn, ok := n.Fn.(*syntax.DotExpr); ok {
				if x, ok := fn.X.(*syntax.Ident); ok && x.Name == "k8s" {
					switch {
					case fn.Name.Name == "object" && len(n.Args) >= 2:
						if k := stringLiteral(n.Args[1]); k != "" {
							add(k, n)
						}
					case constructorKinds[fn.Name.Name] != "":
						add(constructorKinds[fn.Name.Name], n)
					}
				}
			}
		}
		return true
	})
	return sites
}

// stringLiteral returns the value of a string literal, or "".
func stringLiteral(e syntax.Expr) string {
	if l, ok := e.(*syntax.Literal); ok && l.Token == syntax.STRING {
		if s, ok := l.Value.(string); ok {
			return s
		}
	}
	return ""
}

// Site returns where the module builds objects of kind, when that is one
// place; ok is false when no place or several do.
func (m *Module) Site(kind string) (pos syntax.Position, ok bool) {
	ps := m.sites[kind]
	if len(ps) != 1 {
		return syntax.Position{}, false
	}
	return ps[0], true
}
