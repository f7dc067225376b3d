package starlark

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/bazelbuild/buildtools/build"
	"go.starlark.net/syntax"
)

// Format returns src, a script of the transforms' dialect, formatted as
// buildifier formats a generic Starlark file (bazelbuild/buildtools'
// build package, file type "default": none of the rewrites meant for
// BUILD files, such as sorting a rule's arguments or fixing labels). name
// is the file's path, for errors. A script that does not parse is an error
// naming name:line:col, as the interpreter would report it.
//
// buildtools parses Bazel's dialect, which has neither while loops nor
// bytes literals; the transforms' dialect has both. Format hands them to
// the formatter as placeholders it knows (a for loop over the condition, a
// call on the string) and puts them back afterwards. The result must parse
// to the same statements as src: anything else is an error, never output.
func Format(name string, src []byte) ([]byte, error) {
	f, err := fileOptions.Parse(name, src, syntax.RetainComments)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(src, []byte(placeholderPrefix)) {
		return nil, fmt.Errorf("%s: the name prefix %s is reserved by the formatter", name, placeholderPrefix)
	}
	masked := mask(src, f)
	bf, err := build.ParseDefault(name, masked)
	if err != nil {
		return nil, fmt.Errorf("formatter: %w", err)
	}
	out, err := unmask(name, build.Format(bf))
	if err != nil {
		return nil, err
	}
	if err := sameStatements(name, f, out); err != nil {
		return nil, err
	}
	return out, nil
}

// The placeholders of the dialect buildtools does not parse: a while loop
// becomes "for WHILE in COND:" and a bytes literal b"x" becomes
// "BYTES("x")" (a raw one, rb"x", "BYTES(r"x")"). No script may use a
// name with the prefix.
const (
	placeholderPrefix = "__engine_fmt_"
	whileHead         = "for " + placeholderPrefix + "while in "
	bytesCall         = placeholderPrefix + "bytes"
)

// mask replaces the while keywords and bytes-literal prefixes of src,
// located by the parsed file f, with their placeholders.
func mask(src []byte, f *syntax.File) []byte {
	lines := lineStarts(src)
	off := func(p syntax.Position) int { return byteOffset(src, lines, p) }
	var edits []edit
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.WhileStmt:
			at := off(n.While)
			edits = append(edits, edit{start: at, end: at + len("while"), with: whileHead})
		case *syntax.Literal:
			if n.Token == syntax.BYTES {
				at := off(n.TokenPos)
				// The prefix is b, rb or br, in either case; the
				// literal keeps an r.
				prefix := strings.IndexAny(n.Raw, `"'`)
				with := bytesCall + "("
				if strings.ContainsAny(n.Raw[:prefix], "rR") {
					with += "r"
				}
				end := at + len(n.Raw)
				edits = append(edits, edit{start: at, end: at + prefix, with: with}, edit{start: end, end: end, with: ")"})
			}
		}
		return true
	})
	return splice(src, edits)
}

// edit replaces src[start:end] with with.
type edit struct {
	start, end int
	with       string
}

// splice applies edits that do not overlap to src.
func splice(src []byte, edits []edit) []byte {
	sort.SliceStable(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var b bytes.Buffer
	last := 0
	for _, e := range edits {
		b.Write(src[last:e.start])
		b.WriteString(e.with)
		last = e.end
	}
	b.Write(src[last:])
	return b.Bytes()
}

// unmask puts the while keywords and bytes prefixes back into the
// formatter's output.
func unmask(name string, out []byte) ([]byte, error) {
	out, err := unmaskBytes(name, out)
	if err != nil {
		return nil, err
	}
	// Last: buildtools cannot parse the output once it has while loops.
	return bytes.ReplaceAll(out, []byte(whileHead), []byte("while ")), nil
}

// unmaskBytes puts the bytes literals back into the formatter's output.
func unmaskBytes(name string, out []byte) ([]byte, error) {
	if !bytes.Contains(out, []byte(bytesCall)) {
		return out, nil
	}
	f, err := build.ParseDefault(name, out)
	if err != nil {
		return nil, fmt.Errorf("formatter: %w", err)
	}
	var edits []edit
	var bad error
	build.Walk(f, func(x build.Expr, _ []build.Expr) {
		call, ok := x.(*build.CallExpr)
		if !ok {
			return
		}
		if id, ok := call.X.(*build.Ident); !ok || id.Name != bytesCall {
			return
		}
		start, end := call.Span() // end is past the ")"
		s, ok := onlyString(call)
		if !ok {
			bad = fmt.Errorf("%s:%d: formatter: a bytes literal did not survive formatting", name, start.Line)
			return
		}
		edits = append(edits, edit{start: start.Byte, end: end.Byte, with: bytesLiteral(s)})
	})
	if bad != nil {
		return nil, bad
	}
	return splice(out, edits), nil
}

// onlyString returns the one string argument of a placeholder call.
func onlyString(call *build.CallExpr) (*build.StringExpr, bool) {
	if len(call.List) != 1 {
		return nil, false
	}
	s, ok := call.List[0].(*build.StringExpr)
	return s, ok
}

// bytesLiteral is the bytes literal a placeholder's string stood for: its
// own quoting, with b in front (rb for a raw string).
func bytesLiteral(s *build.StringExpr) string {
	tok := s.Token
	if tok == "" {
		tok = build.FormatString(s)
	}
	if strings.HasPrefix(tok, "r") || strings.HasPrefix(tok, "R") {
		return "rb" + tok[1:]
	}
	return "b" + tok
}

// sameStatements fails unless out parses to what f holds: the formatter
// may move tokens and comments, never change the program.
func sameStatements(name string, f *syntax.File, out []byte) error {
	g, err := fileOptions.Parse(name, out, 0)
	if err != nil {
		return fmt.Errorf("formatter: the formatted file does not parse: %w", err)
	}
	if a, b := dump(f), dump(g); a != b {
		return fmt.Errorf("%s: formatter: the formatted file would change the program; leave it as it is", name)
	}
	return nil
}

// dump prints a file's syntax without positions or comments, so that two
// layouts of one program print alike. Loads and call arguments are
// compared as sets where buildifier sorts them (load order, named
// arguments before *args), and string statements (docstrings, which
// buildifier re-indents) are not compared.
func dump(f *syntax.File) string {
	var b strings.Builder
	var walk func(n syntax.Node)
	walk = func(n syntax.Node) {
		fmt.Fprintf(&b, "(%T", n)
		switch n := n.(type) {
		case *syntax.Ident:
			b.WriteString(" " + n.Name)
		case *syntax.Literal:
			fmt.Fprintf(&b, " %s %#v", n.Token, n.Value)
		case *syntax.BinaryExpr:
			b.WriteString(" " + n.Op.String())
		case *syntax.UnaryExpr:
			b.WriteString(" " + n.Op.String())
		case *syntax.AssignStmt:
			b.WriteString(" " + n.Op.String())
		case *syntax.BranchStmt:
			b.WriteString(" " + n.Token.String())
		case *syntax.DotExpr:
			b.WriteString(" ." + n.Name.Name)
		case *syntax.ExprStmt:
			// A string statement, such as a docstring, does nothing:
			// buildifier may re-indent it.
			if lit, ok := n.X.(*syntax.Literal); ok && lit.Token == syntax.STRING {
				b.WriteString(" docstring)")
				return
			}
		case *syntax.LoadStmt:
			fmt.Fprintf(&b, " %#v", n.Module.Value)
			var names []string
			for i := range n.From {
				names = append(names, n.To[i].Name+"="+n.From[i].Name)
			}
			sort.Strings(names)
			b.WriteString(" " + strings.Join(names, ","))
			b.WriteString(")")
			return
		}
		if call, ok := n.(*syntax.CallExpr); ok {
			walk(call.Fn)
			args := make([]string, len(call.Args))
			for i, a := range call.Args {
				var sub strings.Builder
				sub, b = b, sub
				walk(a)
				sub, b = b, sub
				args[i] = sub.String()
			}
			// buildifier puts positional arguments first, then named
			// ones, *args and **kwargs, each group in its order.
			sort.SliceStable(args, func(i, j int) bool { return argRank(args[i]) < argRank(args[j]) })
			b.WriteString(strings.Join(args, ""))
			b.WriteString(")")
			return
		}
		first := true
		syntax.Walk(n, func(c syntax.Node) bool {
			if first {
				first = false
				return true // n itself
			}
			if c != nil { // Walk ends each node's children with nil
				walk(c)
			}
			return false
		})
		b.WriteString(")")
	}
	loads := []string{}
	for _, s := range f.Stmts {
		if l, ok := s.(*syntax.LoadStmt); ok {
			var sub strings.Builder
			sub, b = b, sub
			walk(l)
			sub, b = b, sub
			loads = append(loads, sub.String())
			continue
		}
		walk(s)
	}
	sort.Strings(loads)
	return strings.Join(loads, "") + b.String()
}

// argRank orders a dumped call argument as buildifier does.
func argRank(dumped string) int {
	switch {
	case strings.HasPrefix(dumped, "(*syntax.UnaryExpr **"):
		return 3
	case strings.HasPrefix(dumped, "(*syntax.UnaryExpr *"):
		return 2
	case strings.HasPrefix(dumped, "(*syntax.BinaryExpr ="):
		return 1
	}
	return 0
}

// lineStarts returns the byte offset of each line of src.
func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// byteOffset converts a position (1-based line, 1-based column in runes)
// into a byte offset in src.
func byteOffset(src []byte, lines []int, p syntax.Position) int {
	at := lines[p.Line-1]
	for col := int32(1); col < p.Col && at < len(src); col++ {
		_, size := utf8.DecodeRune(src[at:])
		at += size
	}
	return at
}
